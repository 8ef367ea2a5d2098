"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546.

Owns both handlers. Describe is answered from this broker's metadata image, as Kafka's
ClientQuotasImage.describe answers it: each filter component names an entity type and
matches an exact name (0), the default entity (1) or any entity of that type (2); an entity
matches when it has every component's type with a matching name and, with `strict`, no
other type. A malformed filter (an empty or repeated type, a name where none belongs or none
where one does, ip with user or client-id) is INVALID_REQUEST, an unknown entity type or
match type UNSUPPORTED_VERSION, with no entries. Alter is forwarded to the active
controller (broker.controller.quota_control validates and writes the records); a
successful answer waits (at most VISIBILITY_WAIT_S) until this broker's image shows it, so
the client's next describe here, and the quotas enforced here, see it.

With an authorizer, Describe needs DESCRIBE_CONFIGS and Alter ALTER_CONFIGS on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise), as Kafka's KafkaApis asks.
"""

from __future__ import annotations

from typing import Any

from broker.controller.image import QuotaEntity, quota_entity
from broker.controller.quota_control import CLIENT_ID, IP, USER
from broker.controller_channel import ControllerUnavailable
from broker.handlers.common import forward
from broker.handlers.context import RequestContext
from broker.metadata_cache import MetadataCache
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster
from protocol import messages as m
from protocol.errors import ErrorCode

VISIBILITY_WAIT_S = 5.0
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class _FilterError(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


def _filter(components: Any) -> tuple[dict[str, str | None], set[str]]:
    """Kafka's checks of a describe filter: (exact names by type, types matched by any)."""
    exact: dict[str, str | None] = {}
    any_name: set[str] = set()
    for c in components:
        if not c.entity_type:
            raise _FilterError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in any_name:
            raise _FilterError(ErrorCode.INVALID_REQUEST, f"Entity type {c.entity_type} "
                               "cannot appear more than once in the filter.")
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise _FilterError(ErrorCode.UNSUPPORTED_VERSION,
                               f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise _FilterError(ErrorCode.INVALID_REQUEST, "Request specified "
                                   "MATCH_TYPE_EXACT, but set match string to null.")
            exact[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise _FilterError(ErrorCode.INVALID_REQUEST, "Request specified "
                                   "MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[c.entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise _FilterError(ErrorCode.INVALID_REQUEST, "Request specified "
                                   "MATCH_TYPE_SPECIFIED, but also specified a match string.")
            any_name.add(c.entity_type)
        else:
            raise _FilterError(ErrorCode.UNSUPPORTED_VERSION,
                               f"Unknown match type {c.match_type}")
    types = exact.keys() | any_name
    if IP in types and (USER in types or CLIENT_ID in types):
        raise _FilterError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component "
                           "combination. IP filter component should not be used with user "
                           "or clientId filter component.")
    return exact, any_name


def _matches(entity: QuotaEntity, exact: dict[str, str | None], any_name: set[str],
             strict: bool) -> bool:
    names = dict(entity)
    if strict and len(names) != len(exact) + len(any_name):
        return False
    return (all(t in names and names[t] == n for t, n in exact.items())
            and all(t in names for t in any_name))


def describe(quotas: Any, components: Any, strict: bool) -> dict:
    """The DescribeClientQuotas answer over `quotas` (an image's `client_quotas`)."""
    try:
        exact, any_name = _filter(components)
    except _FilterError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "error_message": str(e),
                "entries": None}
    entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
               for entity, values in quotas.items()
               if _matches(entity, exact, any_name, strict)]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "entries": entries}


async def handle_describe(ctx: RequestContext) -> dict:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed.", "entries": None}
    return describe(ctx.broker.metadata_cache.image.client_quotas, ctx.body.components,
                    ctx.body.strict)


def _refused(body: Any, code: ErrorCode, message: str) -> dict:
    return {"throttle_time_ms": 0, "entries": [
        {"error_code": code, "error_message": message,
         "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name}
                    for e in entry.entity]} for entry in body.entries]}


async def handle_alter(ctx: RequestContext) -> dict:
    body = ctx.body
    if not authorize_cluster(ctx, AclOperation.ALTER_CONFIGS):
        return _refused(body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        "Cluster authorization failed.")
    try:
        response = await forward(ctx.broker, m.ALTER_CLIENT_QUOTAS, ctx.version, body)
    except ControllerUnavailable:
        return _refused(body, ErrorCode.REQUEST_TIMED_OUT,
                        "No controller answered within the request timeout.")
    expected: list[tuple[QuotaEntity, str, float | None]] = []
    if not body.validate_only:
        for entry, result in zip(body.entries, response["entries"]):
            if result["error_code"] != ErrorCode.NONE:
                continue
            entity = quota_entity((e.entity_type, e.entity_name) for e in entry.entity)
            expected += [(entity, op.key, None if op.remove else op.value) for op in entry.ops]

    def visible(cache: MetadataCache) -> bool:
        quotas = cache.image.client_quotas
        return all(quotas.get(entity, {}).get(key) == value
                   for entity, key, value in expected)

    if expected and not visible(ctx.broker.metadata_cache):
        await ctx.broker.wait_for_metadata(visible, VISIBILITY_WAIT_S)
    return {"throttle_time_ms": 0, **dict(response)}
