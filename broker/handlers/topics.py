"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, forwarded to the
active controller (KIP-590).

The controller validates each topic and answers for each on its own, with Kafka's error
codes; this broker adds only what it can say without the controller: DeleteTopics is refused
here when delete.topic.enable is off, and for __consumer_offsets, the group coordinator's own
log. When no controller answers within the request's timeout every topic gets
REQUEST_TIMED_OUT, which clients retry.

A successful answer is held until the change is in this broker's metadata image (at most
the request's timeout_ms, capped at VISIBILITY_WAIT_S), so that the client's next Metadata
here already sees it, and until this broker has made its own replicas' logs of new
partitions, for at most LOGS_WAIT_S more: enough for any creation of a few hundred
partitions, so a client producing right after its CreateTopics finds them served. A
creation of thousands answers without waiting for all of them, as Kafka's controller
answers once the records are committed: a partition whose log is still being made answers
NOT_LEADER_OR_FOLLOWER, which clients retry after a metadata refresh. CreateTopics v5+ answers carry the new topic's effective configs:
the broker's defaults overlaid with the topic's overrides (broker.handlers.configs).
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

import trio

from broker.config import ConfigError, validate_topic_configs
from broker.controller_channel import ControllerUnavailable
from broker.handlers.configs import topic_config_entries, topic_overrides
from broker.handlers.common import forward
from broker.handlers.context import RequestContext
from broker.metadata_cache import INTERNAL_TOPICS, MetadataCache
from broker.security.acls import AclOperation, ResourceType
from broker.security.authorize import authorize_cluster, authorize_topic, enabled, unauthorized
from protocol import messages as m
from protocol.errors import ErrorCode

VISIBILITY_WAIT_S = 5.0
# Making 3,000 partitions' logs here took 5.3 s on the bench's 2-core machine; 300 take 0.5 s
LOGS_WAIT_S = 1.0
CONFIGS_IN_RESPONSE = 5  # CreateTopics v5+ returns the created topic's configs
TOPIC_IDS = 6  # DeleteTopics v6+ names topics by name or id
NO_CONTROLLER = "No controller answered within the request timeout."
ZERO_UUID = uuid.UUID(int=0)


def _error(code: ErrorCode, message: str | None = None) -> dict:
    return {"error_code": code, "error_message": message}


async def _forward(ctx: RequestContext, api_key: int, body: Any) -> dict | None:
    """The controller's answer, or None when no controller answered in time."""
    try:
        return await forward(ctx.broker, api_key, ctx.version, body)
    except ControllerUnavailable:
        return None


async def _await_visible(ctx: RequestContext, predicate: Callable[[MetadataCache], bool],
                         timeout_ms: int, made: tuple[str, ...] = ()) -> None:
    """Hold the answer until this broker's image shows the change, then until its logs
    of the `made` topics' new partitions are made (`Broker.serves`, LOGS_WAIT_S at most),
    within the request's own timeout; past it the change is still committed, just not
    here yet."""
    deadline = trio.current_time() + min(max(timeout_ms, 0) / 1000, VISIBILITY_WAIT_S)
    broker = ctx.broker
    if deadline <= trio.current_time():
        return
    if not predicate(broker.metadata_cache) and not await broker.wait_for_metadata(
            predicate, deadline - trio.current_time()):
        return
    deadline = min(deadline, trio.current_time() + LOGS_WAIT_S)
    if not broker.serves(made) and deadline > trio.current_time():
        await broker.wait_for_metadata(lambda _: broker.serves(made),
                                       deadline - trio.current_time())


# -- controller_mutation_rate (KIP-599) --------------------------------------------------------

# the versions from which a topic over the quota is refused with THROTTLING_QUOTA_EXCEEDED
# (strict); before them every topic goes through and only the throttle time says (permissive)
STRICT_MUTATION_QUOTA = {m.CREATE_TOPICS: 6, m.DELETE_TOPICS: 5, m.CREATE_PARTITIONS: 3}
THROTTLED = "The throttling quota has been exceeded."


def _mutation_quota(ctx: RequestContext, permits: list[tuple[str | None, int]]) -> set[str | None]:
    """Count each topic's partitions created or deleted against the principal's
    controller_mutation_rate, as Kafka's ControllerMutationQuotaManager does: a strict
    quota (newer versions) refuses a topic while the rate is already over the quota and
    lets the one that crosses it through; a permissive one refuses nothing. Returns the
    topics refused, and leaves the throttle time in `ctx.throttle_ms`."""
    quotas = ctx.broker.metadata_cache.image.client_quotas
    if not quotas or ctx.body.get("validate_only", False):
        return set()
    manager = ctx.broker.quotas.controller_mutation
    user, client_id = ctx.user, ctx.client_id
    strict = ctx.version >= STRICT_MUTATION_QUOTA[ctx.request.api_key]
    refused: set[str | None] = set()
    for name, count in permits:
        now_ms = ctx.broker.now_ms()
        if strict and manager.check(quotas, user, client_id, now_ms) > 0:
            refused.add(name)
            continue
        manager.record(quotas, user, client_id, count, now_ms)
    ctx.throttle_ms = manager.check(quotas, user, client_id, ctx.broker.now_ms())
    return refused


def _partitions_asked(ctx: RequestContext, t: Any) -> int:
    if t.get("assignments"):
        return len(t.assignments)
    return t.num_partitions if t.num_partitions > 0 else ctx.broker.config.num_partitions


# -- CreateTopics ------------------------------------------------------------------------------

def _requested_configs(t) -> dict[str, Any] | None:
    try:
        return validate_topic_configs({c.name: c.value for c in t.configs})
    except ConfigError:
        return None  # the controller accepted what we cannot parse: describe nothing


def _complete_created(ctx: RequestContext, out: dict, requested) -> None:
    """Fill what the controller may leave out of a v5+ answer from this broker's image and
    the request: topic id, partition count, replication factor, effective configs."""
    cache = ctx.broker.metadata_cache
    info = cache.topic(out["name"])
    if info is not None:
        if not out.get("topic_id") or out.get("topic_id") == ZERO_UUID:
            out["topic_id"] = info.topic_id
        if out.get("num_partitions", -1) == -1:
            out["num_partitions"] = len(info.partitions)
        if out.get("replication_factor", -1) == -1 and info.partitions:
            out["replication_factor"] = len(next(iter(info.partitions.values())).replicas)
    if ctx.version >= CONFIGS_IN_RESPONSE and requested is not None:
        overrides = _requested_configs(requested)
        if info is not None:  # what was committed is what counts
            try:
                overrides = topic_overrides(ctx.broker, out["name"])
            except ConfigError:
                pass
        out["configs"] = None if overrides is None else [
            {"name": e["name"], "value": e["value"], "read_only": False,
             "config_source": e["config_source"], "is_sensitive": False}
            for e in topic_config_entries(ctx.broker, overrides)]


def _topic_error(name: str, code: ErrorCode, message: str | None) -> dict:
    return {"name": name, **_error(code, message), "num_partitions": -1,
            "replication_factor": -1, "configs": None}


def _denied_topics(ctx: RequestContext, operation: AclOperation, names: list[str], *,
                   or_cluster: bool = False) -> frozenset[str]:
    """The topics the principal may not `operation` (CREATE may also be held on the
    cluster, which covers every topic)."""
    if not enabled(ctx) or (or_cluster and authorize_cluster(ctx, operation, log_denied=False)):
        return frozenset()
    return unauthorized(ctx, operation, ResourceType.TOPIC, names)


async def handle_create_topics(ctx: RequestContext) -> dict:
    body = ctx.body
    denied = _denied_topics(ctx, AclOperation.CREATE, [t.name for t in body.topics],
                            or_cluster=True)
    refused = [_topic_error(n, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
               for n in dict.fromkeys(t.name for t in body.topics if t.name in denied)]
    wanted = [t for t in body.topics if t.name not in denied]
    throttled = _mutation_quota(ctx, [(t.name, _partitions_asked(ctx, t)) for t in wanted])
    if throttled:
        refused += [_topic_error(n, ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED)
                    for n in dict.fromkeys(t.name for t in wanted if t.name in throttled)]
        wanted = [t for t in wanted if t.name not in throttled]
        denied = denied | frozenset(n for n in throttled if n is not None)
    if not wanted:
        return {"throttle_time_ms": ctx.throttle_ms, "topics": refused}
    forwarded = body if not denied else {
        "topics": wanted, "timeout_ms": body.timeout_ms,
        "validate_only": body.get("validate_only", False)}
    response = await _forward(ctx, m.CREATE_TOPICS, forwarded)
    if response is None:
        return {"throttle_time_ms": 0, "topics": refused + [
            _topic_error(t.name, ErrorCode.REQUEST_TIMED_OUT, NO_CONTROLLER) for t in wanted]}
    results = refused + [dict(t) for t in response["topics"]]
    created = [t["name"] for t in results if t["error_code"] == ErrorCode.NONE]
    if created and not body.validate_only:
        # and until this broker has made its own replicas' logs (off the event loop)
        await _await_visible(ctx, lambda c: all(c.topic(n) is not None for n in created),
                             body.timeout_ms, tuple(created))
    by_name = {t.name: t for t in body.topics}
    for out in results:
        if out["error_code"] == ErrorCode.NONE:
            _complete_created(ctx, out, by_name.get(out["name"]))
    return {"throttle_time_ms": ctx.throttle_ms, "topics": results}


# -- DeleteTopics ------------------------------------------------------------------------------

def _local_refusal(ctx: RequestContext, name: str | None) -> dict | None:
    if not ctx.broker.config.delete_topic_enable:
        return _error(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
    if name in INTERNAL_TOPICS:
        # a coordinator's own log: deleting it would lose every group's offsets or every
        # transaction's state, and leave the coordinator without partitions to serve. Kafka's TopicCommand
        # refuses internal topics; the broker refuses too, so no client can do it.
        return _error(ErrorCode.INVALID_REQUEST,
                      f"Topic {name} is an internal topic and cannot be deleted.")
    return None


async def handle_delete_topics(ctx: RequestContext) -> dict:
    broker, body = ctx.broker, ctx.body
    if ctx.version >= TOPIC_IDS:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    cache = broker.metadata_cache
    results: list[dict] = []
    forwarded: list[tuple[str | None, Any]] = []
    for name, topic_id in wanted:
        if name is None and topic_id is not None:
            info = cache.topic_by_id(topic_id)
            known = info.name if info else None
        else:
            known = name
        refusal: dict | None
        if known is not None and not authorize_topic(ctx, AclOperation.DELETE, known):
            refusal = _error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        else:
            refusal = _local_refusal(ctx, known)
        if refusal is None:
            forwarded.append((name, topic_id))
        results.append({"name": name, "topic_id": topic_id or ZERO_UUID,
                        **(refusal or _error(ErrorCode.NONE))})
    throttled = _mutation_quota(ctx, [(n if n is not None else str(i),
                                       _partition_count(cache, n, i)) for n, i in forwarded])
    if throttled:
        forwarded = [(n, i) for n, i in forwarded
                     if (n if n is not None else str(i)) not in throttled]
        for out in results:
            key = out["name"] if out["name"] is not None else str(out["topic_id"])
            if out["error_code"] == ErrorCode.NONE and key in throttled:
                out.update(_error(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED))
    if forwarded:
        if ctx.version >= TOPIC_IDS:
            request: dict = {"topics": [{"name": n, "topic_id": i} for n, i in forwarded],
                             "timeout_ms": body.timeout_ms}
        else:
            request = {"topic_names": [n for n, _ in forwarded], "timeout_ms": body.timeout_ms}
        response = await _forward(ctx, m.DELETE_TOPICS, request)
        answers = iter(response["responses"] if response is not None else [])
        deleted: list[tuple[str | None, Any]] = []
        for out in results:
            if out["error_code"] != ErrorCode.NONE:
                continue  # refused here
            if response is None:
                out.update(_error(ErrorCode.REQUEST_TIMED_OUT, NO_CONTROLLER))
                continue
            answer = next(answers, None)  # the controller answers in request order
            if answer is None:
                out.update(_error(ErrorCode.UNKNOWN_SERVER_ERROR, "No answer for this topic."))
                continue
            out.update(name=answer.get("name", out["name"]),
                       topic_id=answer.get("topic_id") or out["topic_id"],
                       error_code=answer["error_code"],
                       error_message=answer.get("error_message"))
            if out["error_code"] == ErrorCode.NONE:
                deleted.append((out["name"], out["topic_id"]))
        if deleted:
            await _await_visible(ctx, lambda c: all(_gone(c, n, i) for n, i in deleted),
                                 body.timeout_ms)
    return {"throttle_time_ms": ctx.throttle_ms, "responses": results}


def _partition_count(cache: MetadataCache, name: str | None, topic_id: Any) -> int:
    info = cache.topic(name) if name is not None else cache.topic_by_id(topic_id)
    return len(info.partitions) if info is not None else 0


def _gone(cache: MetadataCache, name: str | None, topic_id: Any) -> bool:
    if topic_id and topic_id != ZERO_UUID:
        return cache.topic_by_id(topic_id) is None
    return name is None or cache.topic(name) is None


# -- CreatePartitions --------------------------------------------------------------------------

async def handle_create_partitions(ctx: RequestContext) -> dict:
    body = ctx.body
    denied = _denied_topics(ctx, AclOperation.ALTER, [t.name for t in body.topics])
    refused = [{"name": n, **_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                    "Authorization failed.")}
               for n in dict.fromkeys(t.name for t in body.topics if t.name in denied)]
    wanted = [t for t in body.topics if t.name not in denied]
    cache = ctx.broker.metadata_cache
    throttled = _mutation_quota(ctx, [(t.name, max(t.count - cache.partition_count(t.name), 0))
                                      for t in wanted])
    if throttled:
        refused += [{"name": n, **_error(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED)}
                    for n in dict.fromkeys(t.name for t in wanted if t.name in throttled)]
        wanted = [t for t in wanted if t.name not in throttled]
        denied = denied | frozenset(n for n in throttled if n is not None)
    if not wanted:
        return {"throttle_time_ms": ctx.throttle_ms, "results": refused}
    forwarded = body if not denied else {
        "topics": wanted, "timeout_ms": body.timeout_ms, "validate_only": body.validate_only}
    response = await _forward(ctx, m.CREATE_PARTITIONS, forwarded)
    if response is None:
        return {"throttle_time_ms": 0, "results": refused + [
            {"name": t.name, **_error(ErrorCode.REQUEST_TIMED_OUT, NO_CONTROLLER)}
            for t in wanted]}
    results = refused + [dict(r) for r in response["results"]]
    counts = {t.name: t.count for t in body.topics}
    grown = [(r["name"], counts[r["name"]]) for r in results
             if r["error_code"] == ErrorCode.NONE and r["name"] in counts]
    if grown and not body.validate_only:
        await _await_visible(
            ctx, lambda c: all(c.partition_count(n) >= count for n, count in grown),
            body.timeout_ms, tuple(n for n, _ in grown))
    return {"throttle_time_ms": ctx.throttle_ms, "results": results}
