"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554.

Owns both handlers. Describe is answered from this broker's metadata image (the mechanisms
and iterations of each user's credentials, never a salt or key): every user with a
credential when the request names none (null or empty), RESOURCE_NOT_FOUND for a named user with none,
DUPLICATE_RESOURCE for a user named twice. Alter is forwarded to the active controller
(broker.controller.scram_control checks each alteration and writes the records); a
successful answer waits (at most VISIBILITY_WAIT_S) until this broker's image shows the
change, so a client that logs in right after its alteration finds it.

With an authorizer, Describe needs DESCRIBE and Alter ALTER on the cluster, refused with
CLUSTER_AUTHORIZATION_FAILED (the whole request, as Kafka's KafkaApis answers it).
"""

from __future__ import annotations

from collections import Counter

from broker.controller_channel import ControllerUnavailable
from broker.handlers.common import forward
from broker.handlers.context import RequestContext
from broker.metadata_cache import MetadataCache
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster
from protocol import messages as m
from protocol.errors import ErrorCode

VISIBILITY_WAIT_S = 5.0


async def handle_describe(ctx: RequestContext) -> dict:
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {"throttle_time_ms": 0, "results": [],
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed."}
    credentials = ctx.broker.metadata_cache.image.scram_credentials
    by_user: dict[str, list[dict]] = {}
    for (user, mechanism), credential in sorted(credentials.items()):
        by_user.setdefault(user, []).append({"mechanism": mechanism,
                                             "iterations": credential.iterations})
    # null or empty: every user, as Kafka reads it
    asked = [u.name for u in ctx.body.users] if ctx.body.users else None
    results = []
    if asked is None:
        results = [{"user": u, "error_code": ErrorCode.NONE, "error_message": None,
                    "credential_infos": infos} for u, infos in by_user.items()]
    else:
        counts = Counter(asked)
        for user in dict.fromkeys(asked):
            if counts[user] > 1:
                code, message = ErrorCode.DUPLICATE_RESOURCE, f"Cannot describe SCRAM " \
                    f"credentials for the same user twice in a single request: {user}"
            elif user not in by_user:
                code, message = ErrorCode.RESOURCE_NOT_FOUND, \
                    f"Attempt to describe a user credential that does not exist: {user}"
            else:
                code, message = ErrorCode.NONE, None
            results.append({"user": user, "error_code": code, "error_message": message,
                            "credential_infos": by_user.get(user, []) if not message else []})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "results": results}


async def handle_alter(ctx: RequestContext) -> dict:
    body = ctx.body
    alterations = [*body.deletions, *body.upsertions]
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
             "error_message": "Cluster authorization failed."}
            for u in dict.fromkeys(a.name for a in alterations)]}
    try:
        response = await forward(ctx.broker, m.ALTER_USER_SCRAM_CREDENTIALS, ctx.version, body)
    except ControllerUnavailable:
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": ErrorCode.REQUEST_TIMED_OUT,
             "error_message": "No controller answered within the request timeout."}
            for u in dict.fromkeys(a.name for a in alterations)]}
    done = {r["user"] for r in response["results"] if r["error_code"] == ErrorCode.NONE}
    expected = ([(d.name, d.mechanism, None) for d in body.deletions if d.name in done]
                + [(u.name, u.mechanism, u.iterations, bytes(u.salt))
                   for u in body.upsertions if u.name in done])

    def visible(cache: MetadataCache) -> bool:
        credentials = cache.image.scram_credentials
        for name, mechanism, *shown in expected:
            credential = credentials.get((name, mechanism))
            if shown == [None]:
                if credential is not None:
                    return False
            elif credential is None or (credential.iterations, credential.salt) != tuple(shown):
                return False
        return True

    if expected and not visible(ctx.broker.metadata_cache):
        await ctx.broker.wait_for_metadata(visible, VISIBILITY_WAIT_S)
    return {"throttle_time_ms": 0, **dict(response)}
