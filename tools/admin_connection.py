"""A small blocking admin client for the command-line tools.

Owns: `NodeConnection` (one socket to one broker node, speaking through the sans-IO
protocol.connection.ClientConnection: ApiVersions first, then every request at the version
protocol.versions.pick_version chooses from the broker's advertised range) and
`AdminClient` (bootstrap addresses, Metadata for node addresses and partition leaders, one
connection per node, the coordinator lookup with retries).

Everything that goes wrong surfaces as `AdminError` with a one-line message meant for the
person at the terminal: unreachable broker, timeout, an API the broker does not serve, a
Kafka error code. Requests run one at a time per connection; each waits at most `timeout`
seconds.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Iterable

from client import config as client_config
from client.connection import api_name
from protocol.connection import NEED_DATA, ClientConnection, Response
from protocol.errors import DecodeError, ErrorCode, ProtocolError
from protocol.messages import API_VERSIONS, FIND_COORDINATOR, METADATA
from protocol.versions import implemented, pick_version

__all__ = ["AdminClient", "AdminError", "NodeConnection", "UnsupportedApi", "api_name",
           "error_name", "parse_address"]

CLIENT_ID = "minibroker-admin"
DEFAULT_TIMEOUT_S = 5.0
# Errors that mean "ask again shortly": the coordinator is loading, moving or being created.
RETRIABLE_COORDINATOR_ERRORS = frozenset({
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
})
RETRY_BACKOFF_S = 0.1


class AdminError(Exception):
    """A failure worth one line on stderr."""


class UnsupportedApi(AdminError):
    """The broker does not advertise the API, or no version is common to both sides."""


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


def parse_address(text: str, default_port: int = 9092) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT or HOST (client.config's parser), as an AdminError."""
    try:
        return client_config.parse_address(text, default_port)
    except ValueError as e:
        raise AdminError(str(e)) from None


class NodeConnection:
    """One blocking connection to one broker node."""

    def __init__(self, host: str, port: int, *, timeout: float = DEFAULT_TIMEOUT_S,
                 client_id: str = CLIENT_ID):
        self.host, self.port = host, port
        self.address = f"{host}:{port}"
        self.timeout = timeout
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except socket.timeout:
            raise AdminError(f"cannot connect to {self.address}: no answer within "
                             f"{timeout:g}s") from None
        except OSError as e:
            raise AdminError(f"cannot connect to {self.address}: {e.strerror or e}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn = ClientConnection(client_id)
        try:
            self.api_versions = self._handshake()
        except BaseException:
            self.close()
            raise

    # -- the handshake -------------------------------------------------------------

    def _handshake(self) -> dict[int, tuple[int, int]]:
        """ApiVersions at our highest version; a broker that does not know it answers
        UNSUPPORTED_VERSION with its own range (KIP-511), and we ask again at the best
        version both know."""
        body = {"client_software_name": CLIENT_ID, "client_software_version": "0.1.0"}
        ours = implemented(API_VERSIONS)
        assert ours is not None  # protocol.messages declares ApiVersions
        resp = self._roundtrip(API_VERSIONS, ours[1], body)
        if resp.body.error_code == ErrorCode.UNSUPPORTED_VERSION:
            theirs = {k.api_key: (k.min_version, k.max_version) for k in resp.body.api_keys}
            version = pick_version(API_VERSIONS, *theirs.get(API_VERSIONS, (0, 0)))
            if version is None:
                raise UnsupportedApi(f"the broker at {self.address} shares no ApiVersions "
                                     f"version with us")
            resp = self._roundtrip(API_VERSIONS, version, body)
        if resp.body.error_code != ErrorCode.NONE:
            raise AdminError(f"ApiVersions to {self.address} failed: "
                             f"{error_name(resp.body.error_code)}")
        return {k.api_key: (k.min_version, k.max_version) for k in resp.body.api_keys}

    def supports(self, api_key: int) -> bool:
        rng = self.api_versions.get(api_key)
        return rng is not None and pick_version(api_key, *rng) is not None

    def version(self, api_key: int) -> int:
        rng = self.api_versions.get(api_key)
        if rng is None:
            raise UnsupportedApi(f"the broker at {self.address} does not serve "
                                 f"{api_name(api_key)} (api key {api_key})")
        version = pick_version(api_key, *rng)
        if version is None:
            ours = implemented(api_key)
            ours_text = "none" if ours is None else f"{ours[0]}-{ours[1]}"
            raise UnsupportedApi(f"no {api_name(api_key)} version in common with the broker "
                                 f"at {self.address} (it serves {rng[0]}-{rng[1]}, we speak "
                                 f"{ours_text})")
        return version

    # -- requests ------------------------------------------------------------------

    def request(self, api_key: int, body: Any) -> Response:
        """Send one request at the negotiated version and wait for its response."""
        return self._roundtrip(api_key, self.version(api_key), body)

    def _roundtrip(self, api_key: int, version: int, body: Any) -> Response:
        what = f"{api_name(api_key)} v{version}"
        try:
            correlation_id, data = self._conn.send_request(api_key, version, body)
            self._sock.sendall(data)
            while True:
                resp = self._conn.next_response()
                if resp is not NEED_DATA:
                    break
                chunk = self._sock.recv(1 << 16)
                if not chunk:
                    raise AdminError(f"the broker at {self.address} closed the connection "
                                     f"instead of answering {what}")
                self._conn.receive_data(chunk)
        except socket.timeout:
            raise AdminError(f"no answer to {what} from {self.address} within "
                             f"{self.timeout:g}s") from None
        except OSError as e:
            raise AdminError(f"{what} to {self.address} failed: {e.strerror or e}") from None
        except (DecodeError, ProtocolError) as e:
            raise AdminError(f"cannot read the answer to {what} from {self.address}: "
                             f"{e}") from None
        if resp.correlation_id != correlation_id:  # one request at a time: cannot happen
            raise AdminError(f"{self.address} answered correlation id {resp.correlation_id}, "
                             f"expected {correlation_id}")
        return resp

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


class AdminClient:
    """Connections to a cluster, found from bootstrap addresses ("h1:p1,h2:p2").

        with AdminClient("127.0.0.1:9092") as admin:
            node_id, conn = admin.coordinator("my-group")
            conn.request(DESCRIBE_GROUPS, {"groups": ["my-group"]})
    """

    def __init__(self, bootstrap: str, *, timeout: float = DEFAULT_TIMEOUT_S):
        self.bootstrap = [parse_address(a) for a in bootstrap.split(",") if a.strip()]
        if not self.bootstrap:
            raise AdminError("no bootstrap server given")
        self.timeout = timeout
        self.brokers: dict[int, tuple[str, int]] = {}  # node id -> address, from Metadata
        self._conns: dict[tuple[str, int], NodeConnection] = {}

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    # -- connections ---------------------------------------------------------------

    def connect(self, host: str, port: int) -> NodeConnection:
        conn = self._conns.get((host, port))
        if conn is None:
            conn = self._conns[(host, port)] = NodeConnection(host, port, timeout=self.timeout)
        return conn

    def drop(self, conn: NodeConnection) -> None:
        """Forget a connection (after NOT_COORDINATOR, say); the next use reconnects."""
        if self._conns.get((conn.host, conn.port)) is conn:
            del self._conns[(conn.host, conn.port)]
        conn.close()

    def any_node(self) -> NodeConnection:
        """A live connection: one already open, else the first bootstrap address that
        answers; raises the first failure when none does."""
        if self._conns:
            return next(iter(self._conns.values()))
        first: AdminError | None = None
        for host, port in self.bootstrap:
            try:
                return self.connect(host, port)
            except AdminError as e:
                first = first or e
        assert first is not None
        raise first

    def node(self, node_id: int, fallback: tuple[str, int] | None = None) -> NodeConnection:
        """The connection to a node, by the address Metadata gave (else `fallback`)."""
        if node_id not in self.brokers and fallback is None:
            self.metadata([])
        address = self.brokers.get(node_id, fallback)
        if address is None:
            raise AdminError(f"node {node_id} is not in the cluster metadata")
        return self.connect(*address)

    # -- Metadata --------------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None) -> Any:
        """Metadata for `topics` (None: every topic; []: none, only brokers). Never
        creates topics. Refreshes `brokers`."""
        conn = self.any_node()
        version = conn.version(METADATA)
        names = None if topics is None else list(topics)
        wire: list[dict] | None
        if names is None:
            wire = [] if version == 0 else None  # v0: an empty list means all topics
        elif not names and version == 0:
            wire = [{"name": "__no_such_topic__"}]  # v0 cannot ask for no topics
        else:
            wire = [{"name": n} for n in names]
        body = conn.request(METADATA, {"topics": wire, "allow_auto_topic_creation": False}).body
        self.brokers = {b.node_id: (b.host, b.port) for b in body.brokers}
        return body

    def leaders(self, topics: Iterable[str]) -> dict[tuple[str, int], int | None]:
        """(topic, partition) -> leader node id (None when the topic is unknown)."""
        out: dict[tuple[str, int], int | None] = {}
        for t in self.metadata(sorted(set(topics))).topics:
            if t.error_code != ErrorCode.NONE:
                continue
            for p in t.partitions:
                out[(t.name, p.partition_index)] = p.leader_id if p.leader_id >= 0 else None
        return out

    # -- coordinators ----------------------------------------------------------------

    def find_coordinator(self, group: str, deadline: float | None = None
                         ) -> tuple[int, str, int]:
        """(node id, host, port) of the group's coordinator (FindCoordinator, key type 0),
        retrying while the coordinator is not available yet, until `deadline`."""
        deadline = time.monotonic() + self.timeout if deadline is None else deadline
        while True:
            conn = self.any_node()
            version = conn.version(FIND_COORDINATOR)
            body = conn.request(FIND_COORDINATOR, {
                "key": group, "key_type": 0, "coordinator_keys": [group]}).body
            if version >= 4:
                if not body.coordinators:
                    raise AdminError(f"FindCoordinator for group '{group}' returned no "
                                     f"coordinator")
                c = body.coordinators[0]
                code, node_id, host, port = c.error_code, c.node_id, c.host, c.port
                message = c.get("error_message")
            else:
                code, node_id, host, port = body.error_code, body.node_id, body.host, body.port
                message = body.get("error_message")
            if code == ErrorCode.NONE:
                return node_id, host, port
            if code not in RETRIABLE_COORDINATOR_ERRORS or time.monotonic() >= deadline:
                detail = f" ({message})" if message else ""
                raise AdminError(f"FindCoordinator for group '{group}' failed: "
                                 f"{error_name(code)}{detail}")
            time.sleep(RETRY_BACKOFF_S)

    def coordinator(self, group: str, deadline: float | None = None
                    ) -> tuple[int, NodeConnection]:
        """(node id, connection) of the group's coordinator: FindCoordinator names the
        node, Metadata gives its address (FindCoordinator's own address is the fallback
        for a node Metadata does not list)."""
        node_id, host, port = self.find_coordinator(group, deadline)
        if node_id not in self.brokers:
            self.metadata([])
        return node_id, self.node(node_id, fallback=self.brokers.get(node_id, (host, port)))
