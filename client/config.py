"""Typed client configuration with Kafka's property names and defaults.

Owns: `ClientConfig` (what every client needs: bootstrap, connections, metadata, retries),
`AdminConfig`, `ProducerConfig`, the registry of config kinds, and `check_config(kind, **kwargs)`, which is how
the public classes turn their keyword arguments into a config object.

A Kafka property name becomes a Python name by replacing dots with underscores
(`request.timeout.ms` -> `request_timeout_ms`); the dotted form is accepted too. An unknown
name is a `TypeError` that names it (and suggests the nearest known one); a value of the
wrong type is a `TypeError`, an out-of-range value a `ValueError`.

    cfg = check_config("admin", bootstrap_servers="h1:9092,h2:9092", request_timeout_ms=5000)
    cfg.bootstrap_addresses    # [("h1", 9092), ("h2", 9092)]
    check_config("admin", request_timeout=5)   # TypeError: unknown admin config 'request_timeout'

The producer and consumer extend this module: subclass `ClientConfig` with more fields made
by `int_field` / `str_field` / `bool_field` / `choice_field` (or a `field` whose metadata holds
a `check(name, value) -> value`), and register it with `@register_config("producer")`.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from protocol.codecs import CODEC_NAMES, Codec

__all__ = [
    "ClientConfig", "AdminConfig", "ProducerConfig", "check_config", "register_config", "config_kinds",
    "kafka_name", "parse_address", "int_field", "str_field", "bool_field", "choice_field",
    "INT32_MAX", "callable_field",
]

INT32_MAX = 2**31 - 1
Check = Callable[[str, Any], Any]


# -- field helpers ----------------------------------------------------------------------

def _check_int(low: int | None, high: int | None) -> Check:
    def check(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"config {name} must be an int, got {type(value).__name__}")
        if low is not None and value < low:
            raise ValueError(f"config {name} must be >= {low}, got {value}")
        if high is not None and value > high:
            raise ValueError(f"config {name} must be <= {high}, got {value}")
        return value
    return check


def int_field(default: int, *, low: int | None = 0, high: int | None = None) -> Any:
    return field(default=default, metadata={"check": _check_int(low, high)})


def _check_str(nullable: bool) -> Check:
    def check(name: str, value: Any) -> str | None:
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise TypeError(f"config {name} must be a str, got {type(value).__name__}")
        return value
    return check


def str_field(default: str | None, *, nullable: bool = False) -> Any:
    return field(default=default, metadata={"check": _check_str(nullable)})


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"config {name} must be a bool, got {type(value).__name__}")
    return value


def bool_field(default: bool) -> Any:
    return field(default=default, metadata={"check": _check_bool})


def _check_callable(name: str, value: Any) -> Callable[[Any], Any] | None:
    if value is not None and not callable(value):
        raise TypeError(f"config {name} must be a callable or None, got {type(value).__name__}")
    return value


def callable_field() -> Any:
    """A function setting (a serializer, a deserializer), None by default."""
    return field(default=None, metadata={"check": _check_callable})


def choice_field(default: str, choices: Iterable[str]) -> Any:
    allowed = tuple(choices)

    def check(name: str, value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"config {name} must be a str, got {type(value).__name__}")
        if value not in allowed:
            raise ValueError(f"config {name} must be one of {', '.join(allowed)}, got {value!r}")
        return value
    return field(default=default, metadata={"check": check})


def _check_upper(allowed: tuple[str, ...]) -> Check:
    """A choice compared without case, as Kafka's clients compare these names."""
    def check(name: str, value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"config {name} must be a str, got {type(value).__name__}")
        if value.upper() not in allowed:
            raise ValueError(f"config {name} must be one of {', '.join(allowed)}, got {value!r}")
        return value.upper()
    return check


def parse_address(text: str, default_port: int = 9092) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT or HOST; a PLAINTEXT:// prefix is accepted. Anything else
    (`h:9092:1`, `h:`, a bare IPv6 address, blanks in the host) is a ValueError at once,
    rather than a name that can only fail to resolve after the retries."""
    text = text.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ValueError(f"bad broker address {text!r}: expected [IPv6]:PORT")
        port, has_port = rest.removeprefix(":"), bool(rest)
    elif text.count(":") > 1:
        raise ValueError(f"bad broker address {text!r}: expected HOST:PORT "
                         f"(an IPv6 address goes in brackets: [::1]:9092)")
    else:
        host, colon, port = text.partition(":")
        has_port = bool(colon)
    if not host or any(c.isspace() for c in host):
        raise ValueError(f"bad broker address {text!r}: expected HOST:PORT")
    try:
        number = int(port) if has_port else default_port
    except ValueError:
        raise ValueError(f"bad broker address {text!r}: the port must be a number") from None
    if not 0 < number < 65536:
        raise ValueError(f"bad broker address {text!r}: port out of range")
    return host, number


def _check_bootstrap(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [a for a in value.split(",") if a.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(a, str) for a in value):
        items = [a for a in value if a.strip()]
    else:
        raise TypeError(f"config {name} must be a str 'host:port,...' or a list of them, "
                        f"got {type(value).__name__}")
    if not items:
        raise ValueError(f"config {name} names no broker")
    for a in items:
        parse_address(a)
    return tuple(a.strip() for a in items)


# -- the configs ------------------------------------------------------------------------

_client_numbers = itertools.count(1)


@dataclass(frozen=True, kw_only=True)
class ClientConfig:
    """Settings shared by every client (Kafka's CommonClientConfigs)."""

    bootstrap_servers: tuple[str, ...] = field(
        default=("localhost:9092",), metadata={"check": _check_bootstrap})
    client_id: str | None = str_field(None, nullable=True)  # None: "<prefix>-<n>", as Java
    request_timeout_ms: int = int_field(30000)
    metadata_max_age_ms: int = int_field(300000)
    retry_backoff_ms: int = int_field(100)
    retry_backoff_max_ms: int = int_field(1000)
    reconnect_backoff_ms: int = int_field(50)
    reconnect_backoff_max_ms: int = int_field(1000)
    connections_max_idle_ms: int = int_field(540000, low=-1)  # -1: never close idle ones
    socket_connection_setup_timeout_ms: int = int_field(10000)
    # security (client/security.py), with Java's names; sasl_username/sasl_password are
    # librdkafka's shorthand for the JAAS config's username and password
    security_protocol: str = field(default="PLAINTEXT", metadata={"check": _check_upper(
        ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))})
    sasl_mechanism: str = field(default="PLAIN", metadata={"check": _check_upper(
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))})
    sasl_jaas_config: str | None = str_field(None, nullable=True)
    sasl_username: str | None = str_field(None, nullable=True)
    sasl_password: str | None = str_field(None, nullable=True)
    ssl_truststore_location: str | None = str_field(None, nullable=True)
    ssl_truststore_certificates: str | None = str_field(None, nullable=True)
    ssl_keystore_location: str | None = str_field(None, nullable=True)
    ssl_keystore_certificate_chain: str | None = str_field(None, nullable=True)
    ssl_keystore_key: str | None = str_field(None, nullable=True)
    ssl_key_password: str | None = str_field(None, nullable=True)
    ssl_endpoint_identification_algorithm: str = str_field("https")

    _client_id_prefix = "client"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            if check is not None:
                object.__setattr__(self, f.name, check(f.name, getattr(self, f.name)))
        if self.client_id is None:
            object.__setattr__(self, "client_id",
                               f"{self._client_id_prefix}-{next(_client_numbers)}")
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            object.__setattr__(self, "retry_backoff_max_ms", self.retry_backoff_ms)
        if self.reconnect_backoff_max_ms < self.reconnect_backoff_ms:
            object.__setattr__(self, "reconnect_backoff_max_ms", self.reconnect_backoff_ms)

    @property
    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        return [parse_address(a) for a in self.bootstrap_servers]

    def retry_backoff_s(self, attempt: int) -> float:
        """Exponential backoff for the n-th retry (0-based), capped at retry_backoff_max_ms."""
        return min(self.retry_backoff_ms * 2 ** min(attempt, 30),
                   self.retry_backoff_max_ms) / 1000

    def reconnect_backoff_s(self, failures: int) -> float:
        """Wait before reconnecting after `failures` consecutive failures (>= 1)."""
        if failures <= 0:
            return 0.0
        return min(self.reconnect_backoff_ms * 2 ** min(failures - 1, 30),
                   self.reconnect_backoff_max_ms) / 1000


@dataclass(frozen=True, kw_only=True)
class AdminConfig(ClientConfig):
    """AdminClient settings (Kafka's AdminClientConfig)."""

    connections_max_idle_ms: int = int_field(300000, low=-1)
    default_api_timeout_ms: int = int_field(60000)
    retries: int = int_field(INT32_MAX)

    _client_id_prefix = "adminclient"


def _check_acks(name: str, value: Any) -> int:
    """0, 1, -1 or "all" (also as strings, as Kafka's properties); "all" is -1."""
    if isinstance(value, str):
        text = value.strip().lower()
        value = -1 if text == "all" else int(text) if text.lstrip("-").isdigit() else value
    if isinstance(value, bool) or value not in (0, 1, -1):
        raise ValueError(f"config {name} must be 0, 1, -1 or 'all', got {value!r}")
    return int(value)


def _check_optional_bool(name: str, value: Any) -> bool | None:
    return None if value is None else _check_bool(name, value)


@dataclass(frozen=True, kw_only=True)
class ProducerConfig(ClientConfig):
    """Producer settings (Kafka's ProducerConfig), Kafka's defaults except linger_ms.

    - `acks`: 0, 1, -1 / "all" (stored as an int; "all" = -1, Java 3.x's default).
    - `linger_ms` 5: Kafka 4.0's default (KIP-1030; 3.x had 0). A few milliseconds let a
      burst of sends share batches at no visible latency cost.
    - `enable_idempotence`: left unset it is True (as Java 3.x) unless another setting
      conflicts (acks != all, retries == 0, max_in_flight_requests_per_connection > 5),
      in which case it quietly becomes False; set True explicitly with a conflicting
      setting it is a ValueError, as Java's ConfigException.
    - `transactional_id`: makes the producer transactional (client/producer/
      transaction_manager.py), which implies idempotence: unset, enable_idempotence
      becomes True, and False or a conflicting setting is a ValueError, as Java's.
      `transaction_timeout_ms` (60000, Java's) is how long the coordinator lets one of its
      transactions stay open before aborting it.
    """

    acks: int = field(default=-1, metadata={"check": _check_acks})
    compression_type: str = choice_field("none", list(CODEC_NAMES))
    batch_size: int = int_field(16384)
    linger_ms: int = int_field(5)
    max_in_flight_requests_per_connection: int = int_field(5, low=1)
    retries: int = int_field(INT32_MAX)
    delivery_timeout_ms: int = int_field(120000, low=1)
    # Java's max.block.ms: how long a record may wait for its topic's metadata, or send()
    # for buffer_memory to free up, before it fails with KafkaTimeoutError
    max_block_ms: int = int_field(60000)
    request_timeout_ms: int = int_field(30000, low=1)
    enable_idempotence: bool | None = field(
        default=None, metadata={"check": _check_optional_bool})
    buffer_memory: int = int_field(33554432, low=1)
    max_request_size: int = int_field(1048576, low=1)
    allow_auto_create_topics: bool = bool_field(True)
    # applied by send() to a key / value that is not None, as aiokafka's (one argument,
    # the object; returns bytes); a None key or value stays None
    key_serializer: Callable[[Any], bytes] | None = callable_field()
    value_serializer: Callable[[Any], bytes] | None = callable_field()
    transactional_id: str | None = str_field(None, nullable=True)
    transaction_timeout_ms: int = int_field(60000, low=1)

    _client_id_prefix = "producer"

    def __post_init__(self) -> None:
        super().__post_init__()
        conflicts = []
        if self.acks != -1:
            conflicts.append(f"acks={self.acks} (idempotence needs acks=all)")
        if self.retries == 0:
            conflicts.append("retries=0 (idempotence needs retries > 0)")
        if self.max_in_flight_requests_per_connection > 5:
            conflicts.append("max_in_flight_requests_per_connection > 5")
        if self.transactional_id is not None:
            if not self.transactional_id:
                raise ValueError("transactional_id must not be empty")
            if self.enable_idempotence is False:
                raise ValueError("transactional_id needs enable_idempotence (a transactional "
                                 "producer is idempotent)")
            if conflicts:
                raise ValueError("transactional_id needs idempotence, which conflicts with "
                                 + ", ".join(conflicts))
        if self.enable_idempotence is None:
            object.__setattr__(self, "enable_idempotence", not conflicts)
        elif self.enable_idempotence and conflicts:
            raise ValueError("enable_idempotence=True conflicts with " + ", ".join(conflicts))

    @property
    def codec(self) -> int:
        return Codec.from_name(self.compression_type)


# -- kinds and checking -----------------------------------------------------------------

_KINDS: dict[str, type[ClientConfig]] = {"common": ClientConfig, "admin": AdminConfig,
                                         "producer": ProducerConfig}


def register_config(kind: str) -> Callable[[type[ClientConfig]], type[ClientConfig]]:
    """Class decorator: make `check_config(kind, ...)` build this config class."""
    def register(cls: type[ClientConfig]) -> type[ClientConfig]:
        _KINDS[kind] = cls
        return cls
    return register


def config_kinds() -> dict[str, type[ClientConfig]]:
    return dict(_KINDS)


def kafka_name(name: str) -> str:
    """`request_timeout_ms` -> `request.timeout.ms`."""
    return name.replace("_", ".")


def check_config(kind: str, **kwargs: Any) -> ClientConfig:
    """Build the `kind` config from keyword arguments with Kafka's names (dots or underscores)."""
    try:
        cls = _KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown config kind {kind!r} (known: {', '.join(_KINDS)})") from None
    known = [f.name for f in dataclasses.fields(cls) if f.init]
    values: dict[str, Any] = {}
    for key, value in kwargs.items():
        name = key.replace(".", "_")
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise TypeError(f"unknown {kind} config {key!r}{hint}")
        if name in values:
            raise TypeError(f"{kind} config {name!r} given twice")
        values[name] = value
    return cls(**values)
