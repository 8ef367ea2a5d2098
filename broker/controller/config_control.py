"""The controller's dynamic configs: IncrementalAlterConfigs becomes ConfigRecords
(Kafka's ConfigurationControlManager).

Owns `incremental_alter_configs` and the rules of its operations (SET, DELETE, APPEND,
SUBTRACT, Kafka's AlterConfigOp.OpType) on topic, broker and group resources, and
`render_config_value`, the string a ConfigRecord carries for a parsed value. Each resource
is planned on its own against the scratch image: its ops applied to the current dynamic
values, the result validated as a whole (broker.config's rules), and only the keys whose
value changes written; a refused resource writes nothing and answers Kafka's error code.
A list op on a key with no dynamic value starts from its static default, as in Kafka.
Pure: the image comes in, records and the answer go out.
"""

from __future__ import annotations

from typing import Any, Callable

from broker.config import (
    BROKER_PROPERTIES, GROUP_PROPERTIES, TOPIC_PROPERTIES, ConfigError, validate_group_configs,
    validate_topic_configs,
)
from broker.controller.controller_result import Batch, ControllerResult, error, get
from broker.controller.image import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE, MetadataImage
from broker.controller.placement import PlacementError
from protocol.errors import ErrorCode
from protocol.metadata_records import MetadataRecordType as T

# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def incremental_alter_configs(image: MetadataImage, body: Any,
                              topic_altered: Callable[[Batch, str, list[str]], None],
                              ) -> ControllerResult:
    """IncrementalAlterConfigs; `topic_altered` is called with the batch, the topic and
    the keys whose value changed after a topic's records are added, for what a topic's new
    configs set off (an unclean election, its eligible leader replicas cleared)."""
    batch = Batch(image)
    validate_only = bool(get(body, "validate_only", False))
    results = []
    for r in body.resources:
        out = {"resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            changes = _plan_configs(batch.image, r)
        except PlacementError as e:
            results.append({**error(e.error_code, e.message), **out})
            continue
        if not validate_only:
            for key, value in changes:
                batch.add(T.CONFIG_RECORD, 0, {
                    "resource_type": r.resource_type, "resource_name": r.resource_name,
                    "name": key, "value": value})
            if r.resource_type == TOPIC_RESOURCE:
                topic_altered(batch, r.resource_name, [key for key, _ in changes])
        results.append({**error(ErrorCode.NONE), **out})
    return batch.result({"throttle_time_ms": 0, "responses": results})


def _plan_configs(image: MetadataImage, r: Any) -> list[tuple[str, str | None]]:
    """The (key, value or None to delete) ConfigRecords one resource's ops give."""
    if r.resource_type == TOPIC_RESOURCE:
        if image.topic(r.resource_name) is None:
            raise PlacementError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"Topic {r.resource_name!r} does not exist.")
        current = dict(image.topic_configs(r.resource_name))
        props = TOPIC_PROPERTIES
    elif r.resource_type == BROKER_RESOURCE:
        if r.resource_name != "" and not (r.resource_name.isdigit()):
            raise PlacementError(ErrorCode.INVALID_REQUEST,
                                 f"Invalid broker name {r.resource_name!r}.")
        current = dict(image.broker_configs(r.resource_name))
        props = BROKER_PROPERTIES
    elif r.resource_type == GROUP_RESOURCE:
        if not r.resource_name:
            raise PlacementError(ErrorCode.INVALID_REQUEST, "Group name can't be empty.")
        current = dict(image.group_configs(r.resource_name))
        props = GROUP_PROPERTIES
    else:
        raise PlacementError(ErrorCode.INVALID_REQUEST,
                             f"Unsupported resource type {r.resource_type}.")
    new = dict(current)
    keys = [c.name for c in r.configs]
    if len(set(keys)) != len(keys):
        raise PlacementError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys.")
    for c in r.configs:
        prop = props.get(c.name)
        if prop is None:
            raise PlacementError(ErrorCode.INVALID_CONFIG,
                                 f"Unknown config {c.name!r}.")
        op = c.config_operation
        if op == SET:
            if c.value is None:
                raise PlacementError(ErrorCode.INVALID_REQUEST,
                                     f"Null value not supported for {c.name!r}.")
            new[c.name] = c.value
        elif op == DELETE:
            new.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            if prop.kind != "list":
                raise PlacementError(
                    ErrorCode.INVALID_CONFIG,
                    f"Config value {'append' if op == APPEND else 'subtract'} is not "
                    f"allowed for config key {c.name}")
            # an unset list starts from its static default, as in Kafka
            start = new.get(c.name) or render_config_value(
                _static_default(r.resource_type, c.name)) or ""
            items = [x.strip() for x in start.split(",") if x.strip()]
            given = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if op == APPEND:
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            new[c.name] = ",".join(items)
        else:
            raise PlacementError(ErrorCode.INVALID_REQUEST,
                                 f"Unknown config operation {op}.")
    try:
        if r.resource_type == TOPIC_RESOURCE:
            validate_topic_configs(dict(new))
        elif r.resource_type == GROUP_RESOURCE:
            validate_group_configs(new)
        else:
            for key, value in new.items():
                BROKER_PROPERTIES[key].parse(value)
    except ConfigError as e:
        raise PlacementError(ErrorCode.INVALID_CONFIG, str(e)) from None
    return [(k, new.get(k)) for k in dict.fromkeys(keys) if new.get(k) != current.get(k)]


def render_config_value(value: Any) -> str | None:
    """A parsed config value as the string a ConfigRecord carries."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _static_default(resource_type: int, name: str) -> Any:
    """A config's default before any dynamic value: a topic's is the broker default it
    overrides."""
    if resource_type == BROKER_RESOURCE:
        prop = BROKER_PROPERTIES.get(name)
        return None if prop is None else prop.default
    return next((p.default for p in BROKER_PROPERTIES.values() if p.topic_name == name), None)
