"""The controller's client quotas: AlterClientQuotas becomes ClientQuotaRecords (Kafka's
ClientQuotaControlManager, KIP-546).

Owns `alter_client_quotas`, a pure function of the image and the request body that returns
the records to append and the response, and the quota keys each kind of entity takes
(`QUOTA_KEYS`, Kafka's QuotaConfigs). Each entry is checked in Kafka's order and words,
every refusal INVALID_REQUEST: an empty entity, an entity type named twice, an unknown
entity type, an empty name, a combination Kafka does not allow (ip with user or client-id),
a key twice in one entry, an entity altered twice in one request, an unknown key, a
fractional value for a key Kafka types as a long, and (stricter than Kafka, which takes
them) a negative or non-finite value. An entry is written whole or not at all; the other
entries go on. A value equal to the current one, or the removal of a key not set, writes
nothing. `validate_only` answers the same and writes nothing.
"""

from __future__ import annotations

import ipaddress
import math
from collections import Counter
from typing import Any

from broker.controller.controller_result import Record, error
from broker.controller.image import MetadataImage, QuotaEntity, quota_entity
from protocol.errors import ErrorCode
from protocol.metadata_records import MetadataRecordType as T

USER, CLIENT_ID, IP = "user", "client-id", "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# key -> whether Kafka types it as a long (else a double), per kind of entity
_USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True,
                     REQUEST_PERCENTAGE: False, CONTROLLER_MUTATION_RATE: False}
_IP_KEYS = {CONNECTION_CREATION_RATE: True}
QUOTA_KEYS = {USER: _USER_CLIENT_KEYS, CLIENT_ID: _USER_CLIENT_KEYS, IP: _IP_KEYS}

_EPSILON = 1e-6  # Kafka's tolerance for a long given as a double


def _invalid(message: str) -> dict:
    return error(ErrorCode.INVALID_REQUEST, message)


def validate_entity(pairs: list[tuple[str, str | None]]) -> tuple[QuotaEntity | None, dict]:
    """(the entity, NONE) or (None, the refusal): Kafka's validateEntity and
    configKeysForEntityType."""
    if not pairs:
        return None, _invalid("Invalid empty client quota entity")
    seen: set[str] = set()
    for entity_type, name in pairs:
        if entity_type in seen:
            return None, _invalid("Invalid empty client quota entity, duplicate entity "
                                  f"entry {entity_type}")
        seen.add(entity_type)
        if entity_type not in QUOTA_KEYS:
            return None, _invalid(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            return None, _invalid(f"Empty {entity_type} not supported")
    if IP in seen and len(seen) > 1:
        return None, _invalid("Invalid empty client quota entity")
    entity = quota_entity(pairs)
    if IP in seen and entity[0][1] is not None and not _is_ip(entity[0][1]):
        return None, _invalid(f"{entity[0][1]} is not a valid IP or resolvable host.")
    return entity, error(ErrorCode.NONE)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def validate_value(entity: QuotaEntity, key: str, value: float) -> dict | None:
    """The refusal of one `key=value` for `entity`, or None."""
    keys = QUOTA_KEYS[entity[0][0]]
    if key not in keys:
        return _invalid(f"Invalid configuration key {key}")
    if not math.isfinite(value) or value < 0:
        return _invalid(f"Configuration {key} must be a non-negative number")
    if keys[key] and abs(math.floor(value + _EPSILON) - value) > _EPSILON:
        return _invalid(f"Configuration {key} must be a Long value")
    return None


def alter_client_quotas(image: MetadataImage, body: Any) -> tuple[list[Record], dict]:
    entries = [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in body.entries]
    times = Counter(quota_entity(pairs) for pairs in entries)
    records: list[Record] = []
    results = []
    for entry, pairs in zip(body.entries, entries):
        entity, outcome = validate_entity(pairs)
        if entity is not None:
            if times[entity] > 1:
                outcome = _invalid(f"Ignoring duplicate entity {_describe(entity)}")
            else:
                found, outcome = _entry_records(image, entity, entry.ops)
                if not body.validate_only and outcome["error_code"] == ErrorCode.NONE:
                    records.extend(found)
        results.append({**outcome, "entity": [{"entity_type": t, "entity_name": n}
                                              for t, n in pairs]})
    return records, {"throttle_time_ms": 0, "entries": results}


def _entry_records(image: MetadataImage, entity: QuotaEntity,
                   ops: Any) -> tuple[list[Record], dict]:
    keys = Counter(op.key for op in ops)
    current = image.client_quotas.get(entity, {})
    records: list[Record] = []
    wire_entity = [{"entity_type": t, "entity_name": n} for t, n in entity]
    for op in ops:
        if keys[op.key] > 1:
            return [], _invalid(f"Duplicate quota key {op.key} not updating quota for this "
                                f"entity {_describe(entity)}")
        if op.remove:
            if op.key in current:
                records.append((int(T.CLIENT_QUOTA_RECORD), 0, {
                    "entity": wire_entity, "key": op.key, "value": 0.0, "remove": True}))
            continue
        refusal = validate_value(entity, op.key, op.value)
        if refusal is not None:
            return [], refusal
        if current.get(op.key) != op.value:
            records.append((int(T.CLIENT_QUOTA_RECORD), 0, {
                "entity": wire_entity, "key": op.key, "value": float(op.value),
                "remove": False}))
    return records, error(ErrorCode.NONE)


def _describe(entity: QuotaEntity) -> str:
    """Kafka's ClientQuotaEntity.toString: `ClientQuotaEntity(entries={user=alice})`."""
    inner = ", ".join(f"{t}={n}" for t, n in entity)
    return f"ClientQuotaEntity(entries={{{inner}}})"
