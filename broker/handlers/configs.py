"""DescribeConfigs: a topic's effective configuration, or the broker's; and
IncrementalAlterConfigs, forwarded to the active controller, with the legacy AlterConfigs
as the IncrementalAlterConfigs that replaces the resource's whole set of dynamic configs.

A topic's overrides are those of the committed metadata image (ConfigRecords, read through
`broker.metadata_cache.topic_configs`), laid over this broker's defaults; a broker is
described from its own static config. Each entry says where its value comes from
(config_source): 1 a topic override, 4 the broker's static config, 5 Kafka's default. kcat -L
and AdminClient.describe_configs read exactly these fields. Only TOPIC (2) and BROKER (4)
and GROUP (32) resources are described. A broker's dynamic configs (ConfigRecords set with
IncrementalAlterConfigs, for this node id or for "" the cluster-wide default) are laid over
its static ones with source 2 (DYNAMIC_BROKER_CONFIG) or 3 (DYNAMIC_DEFAULT_BROKER_CONFIG),
each with the synonyms beneath it, as Kafka lists them; which of them the broker acts on
is the property's own business (unclean.leader.election.enable, for one, is read by the
controller).

A group's configs (KIP-848, Kafka 4.0's GroupConfig: consumer.session.timeout.ms and
consumer.heartbeat.interval.ms) are described for any group name, existing or not, as
Kafka does: a value set for the group has source 8 (GROUP_CONFIG), else the broker's
group.consumer.* value (DEFAULT_CONFIG, or STATIC_BROKER_CONFIG when set in its config).
The consumer group coordinator applies them to the group's members (broker.coordinator).

IncrementalAlterConfigs (KIP-339) is validated and committed by the controller as
ConfigRecords; a successful answer waits (at most VISIBILITY_WAIT_S) until this broker's
image shows the keys it set or deleted on topics and groups, so the client's next DescribeConfigs here
sees them. No controller in time: REQUEST_TIMED_OUT for every resource.
"""

from __future__ import annotations

from typing import Any

from broker.broker import Broker
from broker.config import (
    BROKER_PROPERTIES, GROUP_PROPERTIES, GROUP_PROPERTY_DEFAULTS, TOPIC_PROPERTIES, ConfigError,
    validate_group_configs, validate_topic_configs,
)
from broker.controller_channel import ControllerUnavailable
from broker.handlers.common import forward
from broker.handlers.context import RequestContext
from broker.metadata_cache import MetadataCache
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster, authorize_group, authorize_topic
from protocol import messages as m
from protocol.errors import ErrorCode

TOPIC, BROKER, GROUP = 2, 4, 32
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations whose outcome is known beforehand
VISIBILITY_WAIT_S = 5.0
INCREMENTAL_VERSION = 1  # what a legacy AlterConfigs is forwarded to the controller as
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, GROUP_CONFIG = 2, 3, 8
_TYPES = {"bool": 1, "str": 2, "int": 3, "long": 5, "double": 6, "list": 7}  # ConfigEntry.ConfigType ids


def _render(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


# topic property -> the broker properties it inherits from (several for time units)
_BROKER_SYNONYMS: dict[str, list[str]] = {}
for _prop in BROKER_PROPERTIES.values():
    if _prop.topic_name:
        _BROKER_SYNONYMS.setdefault(_prop.topic_name, []).append(_prop.name)
_BROKER_SYNONYMS["retention.ms"] += ["log.retention.minutes", "log.retention.hours"]
_BROKER_SYNONYMS["segment.ms"] += ["log.roll.hours"]


def _source(broker: Broker, name: str, overridden: bool) -> int:
    """Where a topic's value comes from, as Kafka reports it: its first synonym's source."""
    if overridden:
        return DYNAMIC_TOPIC_CONFIG
    for broker_name in _BROKER_SYNONYMS.get(name, ()):
        if broker.config[broker_name] != BROKER_PROPERTIES[broker_name].default:
            return STATIC_BROKER_CONFIG
    return DEFAULT_CONFIG


def topic_overrides(broker: Broker, topic: str) -> dict[str, Any]:
    """A topic's overrides from the image, parsed (ConfigError if one does not parse)."""
    return validate_topic_configs(dict(broker.metadata_cache.topic_configs(topic)))


def _topic_synonyms(broker: Broker, name: str, overrides: dict[str, Any]) -> list[dict]:
    """Where a topic's value could come from, first the one that counts: the override,
    the broker properties set in its static config, Kafka's default."""
    out = []
    if name in overrides:
        out.append({"name": name, "value": _render(overrides[name]),
                    "source": DYNAMIC_TOPIC_CONFIG})
    broker_names = _BROKER_SYNONYMS.get(name, [])
    for broker_name in broker_names:
        value = broker.config[broker_name]
        if value != BROKER_PROPERTIES[broker_name].default:
            out.append({"name": broker_name, "value": _render(value),
                        "source": STATIC_BROKER_CONFIG})
    # the default is the first synonym that has one (log.retention.ms has none: hours)
    with_default = [n for n in broker_names if BROKER_PROPERTIES[n].default is not None]
    if with_default:
        first = with_default[0]
        out.append({"name": first, "value": _render(BROKER_PROPERTIES[first].default),
                    "source": DEFAULT_CONFIG})
    return out


def topic_config_entries(broker: Broker, overrides: dict[str, Any]) -> list[dict]:
    defaults = broker.config.topic_defaults()
    entries: list[dict] = []
    for name in sorted(TOPIC_PROPERTIES):
        overridden = name in overrides
        source = _source(broker, name, overridden)
        value = _render(overrides[name] if overridden else defaults.get(name))
        entries.append({
            "name": name, "value": value,
            "read_only": False, "is_default": source == DEFAULT_CONFIG,
            "config_source": source,
            "is_sensitive": False, "synonyms": _topic_synonyms(broker, name, overrides),
            "config_type": _TYPES[TOPIC_PROPERTIES[name].kind], "documentation": None,
        })
    return entries


def _broker_entries(broker: Broker, name: str) -> list[dict]:
    """Every broker property: the dynamic value of this node (or of the cluster-wide
    default, for `name` "") first, then the static one, each source in the synonyms."""
    image = broker.metadata_cache.image
    dynamic = ([] if name == "" else [(DYNAMIC_BROKER_CONFIG, image.broker_configs(name))])
    dynamic.append((DYNAMIC_DEFAULT_BROKER_CONFIG, image.broker_configs("")))
    entries = []
    for key, prop in sorted(BROKER_PROPERTIES.items()):
        static = broker.config[key]
        default = static == prop.default
        synonyms = [{"name": key, "value": configs[key], "source": source}
                    for source, configs in dynamic if key in configs]
        if not default:
            synonyms.append({"name": key, "value": _render(static),
                             "source": STATIC_BROKER_CONFIG})
        if prop.default is not None:
            synonyms.append({"name": key, "value": _render(prop.default),
                             "source": DEFAULT_CONFIG})
        first = synonyms[0] if synonyms else {"value": None, "source": DEFAULT_CONFIG}
        entries.append({
            "name": key, "value": first["value"], "read_only": True,
            "is_default": first["source"] == DEFAULT_CONFIG,
            "config_source": first["source"], "is_sensitive": False,
            "synonyms": synonyms, "config_type": _TYPES[prop.kind], "documentation": None,
        })
    return entries


def _group_entries(broker: Broker, group: str) -> list[dict]:
    overrides = validate_group_configs(broker.metadata_cache.group_configs(group))
    entries = []
    for name, prop in sorted(GROUP_PROPERTIES.items()):
        broker_name = GROUP_PROPERTY_DEFAULTS[name]
        if broker_name is None:  # no broker-wide setting: Kafka's default
            synonyms = [{"name": name, "value": _render(prop.default), "source": DEFAULT_CONFIG}]
        else:
            static = broker.config[broker_name]
            static_source = (DEFAULT_CONFIG if static == BROKER_PROPERTIES[broker_name].default
                             else STATIC_BROKER_CONFIG)
            synonyms = [{"name": broker_name, "value": _render(static),
                         "source": static_source}]
        if name in overrides:
            synonyms.insert(0, {"name": name, "value": _render(overrides[name]),
                                "source": GROUP_CONFIG})
        entries.append({
            "name": name, "value": synonyms[0]["value"], "read_only": False,
            "is_default": synonyms[0]["source"] == DEFAULT_CONFIG,
            "config_source": synonyms[0]["source"], "is_sensitive": False,
            "synonyms": synonyms, "config_type": _TYPES[prop.kind], "documentation": None,
        })
    return entries


def _authorization_error(ctx: RequestContext, operation: AclOperation,
                         resource_type: int, name: str) -> ErrorCode:
    """A topic's configs are the topic's, a broker's the cluster's (Kafka's ConfigHelper)."""
    if resource_type == TOPIC and not authorize_topic(ctx, operation, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type == BROKER and not authorize_cluster(ctx, operation):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if resource_type == GROUP and not authorize_group(ctx, operation, name):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return ErrorCode.NONE


async def handle(ctx: RequestContext) -> dict:
    broker = ctx.broker
    results = []
    for r in ctx.body.resources:
        out = {"error_code": ErrorCode.NONE, "error_message": None,
               "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []}
        denied = _authorization_error(ctx, AclOperation.DESCRIBE_CONFIGS, r.resource_type,
                                      r.resource_name)
        if denied != ErrorCode.NONE:
            out.update(error_code=denied, error_message="Authorization failed.")
        elif r.resource_type == TOPIC:
            if broker.metadata_cache.topic(r.resource_name) is None:
                out.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           error_message=f"Topic {r.resource_name!r} does not exist.")
            else:
                try:
                    overrides = topic_overrides(broker, r.resource_name)
                except ConfigError as e:  # the controller committed what we cannot parse
                    out.update(error_code=ErrorCode.INVALID_CONFIG, error_message=str(e))
                else:
                    out["configs"] = topic_config_entries(broker, overrides)
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(broker.node_id)):
                out.update(error_code=ErrorCode.INVALID_REQUEST,
                           error_message=f"Unknown broker {r.resource_name!r}.")
            else:
                out["configs"] = _broker_entries(broker, r.resource_name)
        elif r.resource_type == GROUP:
            try:
                out["configs"] = _group_entries(broker, r.resource_name)
            except ConfigError as e:
                out.update(error_code=ErrorCode.INVALID_CONFIG, error_message=str(e))
        else:
            out.update(error_code=ErrorCode.INVALID_REQUEST,
                       error_message=f"Resource type {r.resource_type} is not supported.")
        if not ctx.body.get("include_synonyms", False):
            for c in out["configs"]:
                c["synonyms"] = []
        if r.configuration_keys:  # null or empty both mean every key (ConfigHelper)
            keys = set(r.configuration_keys)
            out["configs"] = [c for c in out["configs"] if c["name"] in keys]
        results.append(out)
    return {"throttle_time_ms": 0, "results": results}


async def handle_alter_configs(ctx: RequestContext) -> dict:
    """The legacy AlterConfigs: each resource's dynamic configs become exactly those given,
    as Kafka's controller does it (legacyAlterConfigs): the keys given are set, every
    other key set on the resource now is deleted. It goes to the controller as the
    IncrementalAlterConfigs that says so."""
    resources = []
    for r in ctx.body.resources:
        given = {c.name: c.value for c in r.configs}
        configs = [{"name": k, "config_operation": SET, "value": v} for k, v in given.items()]
        configs += [{"name": k, "config_operation": DELETE, "value": None}
                    for k in sorted(_dynamic_keys(ctx.broker, r.resource_type, r.resource_name))
                    if k not in given]
        resources.append({"resource_type": r.resource_type, "resource_name": r.resource_name,
                          "configs": configs})
    version = INCREMENTAL_VERSION
    body = m.request_body(m.INCREMENTAL_ALTER_CONFIGS, version,
                          {"resources": resources, "validate_only": ctx.body.validate_only})
    return await _alter(ctx, body, version)


def _dynamic_keys(broker: Broker, resource_type: int, name: str) -> set[str]:
    cache = broker.metadata_cache
    if resource_type == TOPIC:
        return set(cache.topic_configs(name))
    if resource_type == GROUP:
        return set(cache.group_configs(name))
    if resource_type == BROKER:
        return set(cache.image.broker_configs(name))
    return set()


async def handle_incremental_alter_configs(ctx: RequestContext) -> dict:
    return await _alter(ctx, ctx.body, ctx.version)


async def _alter(ctx: RequestContext, body: Any, version: int) -> dict:
    refused, wanted = [], []
    for r in body.resources:
        denied = _authorization_error(ctx, AclOperation.ALTER_CONFIGS, r.resource_type,
                                      r.resource_name)
        if denied == ErrorCode.NONE:
            wanted.append(r)
        else:
            refused.append({"error_code": denied, "error_message": "Authorization failed.",
                            "resource_type": r.resource_type,
                            "resource_name": r.resource_name})
    if refused and not wanted:
        return {"throttle_time_ms": 0, "responses": refused}
    forwarded = body if not refused else {"resources": wanted,
                                          "validate_only": body.validate_only}
    try:
        response = await forward(ctx.broker, m.INCREMENTAL_ALTER_CONFIGS, version, forwarded)
    except ControllerUnavailable:
        return {"throttle_time_ms": 0, "responses": refused + [
            {"error_code": ErrorCode.REQUEST_TIMED_OUT,
             "error_message": "No controller answered within the request timeout.",
             "resource_type": r.resource_type, "resource_name": r.resource_name}
            for r in wanted]}
    response = {**dict(response), "responses": refused + list(response["responses"])}
    done = {(r["resource_type"], r["resource_name"]) for r in response["responses"]
            if r["error_code"] == ErrorCode.NONE}
    expected = [(r.resource_type, r.resource_name, c.name,
                 c.value if c.config_operation == SET else None)
                for r in body.resources if r.resource_type in (TOPIC, GROUP)
                and (r.resource_type, r.resource_name) in done
                for c in r.configs if c.config_operation in (SET, DELETE)]

    def visible(cache: MetadataCache) -> bool:
        return all((cache.topic_configs(name) if kind == TOPIC
                    else cache.group_configs(name)).get(key) == value
                   for kind, name, key, value in expected)

    if expected and not body.validate_only and not visible(ctx.broker.metadata_cache):
        await ctx.broker.wait_for_metadata(visible, VISIBILITY_WAIT_S)
    return {"throttle_time_ms": 0, **dict(response)}
