"""`minibroker configs --entity-type users|clients|ips`: client quotas (KIP-546), as
kafka-configs.sh manages them.

    minibroker configs --bootstrap-server H:P --alter --entity-type clients --entity-name c1 \\
        --add-config 'producer_byte_rate=1024,consumer_byte_rate=2048'
    minibroker configs --bootstrap-server H:P --alter --entity-type users --entity-name alice \\
        --entity-type clients --entity-default --add-config request_percentage=50
    minibroker configs --bootstrap-server H:P --alter --entity-type users --entity-default \\
        --delete-config producer_byte_rate
    minibroker configs --bootstrap-server H:P --describe --entity-type clients [--entity-name c1]

Owns the quota half of `minibroker configs` (tools.configs hands over when every
--entity-type is users, clients or ips): the entity from the --entity-type list and the
--entity-name / --entity-default list paired in order, as Kafka's ConfigCommand pairs them;
--alter (AlterClientQuotas: each --add-config key set to its number, each --delete-config
key removed), answering "Completed updating config for client c1." ("Completed updating
default config for users in the cluster." for a default); --describe (DescribeClientQuotas
with the entity types named and nothing else, strict as ConfigCommand's containsOnly: a
name matches that entity, --entity-default the default, neither any entity of the type),
one line per entity: "Quota configs for user-principal 'alice', the default client-id are
request_percentage=50.0". The broker refuses an unknown key or a negative value
(INVALID_REQUEST), which is exit status 1 with its message.
"""

from __future__ import annotations

from typing import TextIO

from client.admin import (
    AdminClient, ClientQuotaAlteration, ClientQuotaFilterComponent, QuotaEntity,
)
from tools.admin_session import ToolError

# kafka-configs.sh's entity types -> KIP-546's
QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
_SHOWN = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


def quota_entity(types: list[str], names: list[str | None]) -> list[tuple[str, str | None | bool]]:
    """[(KIP-546 type, name / None for the default / True for any)], pairing the types with
    the names (and defaults) in the order given; ValueError on a bad pairing."""
    if len(names) > len(types):
        raise ValueError("more --entity-name/--entity-default than --entity-type")
    if len(set(types)) != len(types):
        raise ValueError("an --entity-type is given twice")
    if "ips" in types and len(types) > 1:
        raise ValueError("--entity-type ips cannot be combined with users or clients")
    out: list[tuple[str, str | None | bool]] = []
    for i, kind in enumerate(types):
        name: str | None | bool = names[i] if i < len(names) else True
        if isinstance(name, str) and not name:
            raise ValueError(f"--entity-name of {kind} must not be empty")
        out.append((QUOTA_ENTITY_TYPES[kind], name))
    return out


def parse_values(to_set: dict[str, str]) -> dict[str, float]:
    values = {}
    for key, text in to_set.items():
        try:
            values[key] = float(text)
        except ValueError:
            raise ToolError(f"Cannot parse quota configuration value for {key}: {text}") \
                from None
    return values


def describe_line(entity: QuotaEntity, values: dict[str, float]) -> str:
    """ConfigCommand's line for one quota entity: user first, then client id, then ip."""
    names = dict(entity)
    parts = [f"{_SHOWN[t]} '{names[t]}'" if names[t] is not None else f"the default {_SHOWN[t]}"
             for t in ("user", "client-id", "ip") if t in names]
    shown = ", ".join(f"{k}={v}" for k, v in values.items())
    return f"Quota configs for {', '.join(parts)} are {shown}"


async def describe(admin: AdminClient, entity: list, out: TextIO) -> None:
    components = []
    for kind, name in entity:
        if name is True:
            components.append(ClientQuotaFilterComponent.of_entity_type(kind))
        elif name is None:
            components.append(ClientQuotaFilterComponent.of_default_entity(kind))
        else:
            components.append(ClientQuotaFilterComponent.of_entity(kind, name))
    described = await admin.describe_client_quotas(components, strict=True)
    order = ("user", "client-id", "ip")

    def by_entity(item: tuple) -> list:
        names = dict(item[0])
        return [(names.get(t) is not None, names.get(t) or "") for t in order if t in names]
    for e, values in sorted(described.items(), key=by_entity):
        out.write(describe_line(e, values) + "\n")


async def alter(admin: AdminClient, types: list[str], entity: list,
                to_set: dict[str, str], to_delete: list[str], out: TextIO) -> None:
    if any(name is True for _, name in entity):
        raise ToolError("--alter needs an --entity-name or --entity-default for every "
                        "--entity-type")
    ops: dict[str, float | None] = dict(parse_values(to_set))
    ops.update({k: None for k in to_delete})
    await admin.alter_client_quotas([ClientQuotaAlteration(dict(entity), ops)])
    name = entity[0][1]
    if name is None:
        out.write(f"Completed updating default config for {types[0]} in the cluster.\n")
    else:
        out.write(f"Completed updating config for {types[0][:-1]} {name}.\n")

