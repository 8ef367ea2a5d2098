"""UpdateFeatures (57): forwarded to the active controller, which decides
(broker.controller.features) and writes the FeatureLevelRecords; what a cluster has
finalized is read back through ApiVersions (broker.handlers.api_versions).

Needs ALTER on the cluster, as Kafka. A v0 request's AllowDowngrade becomes v1's
SAFE_DOWNGRADE (Kafka's reading of it), so the controller sees one shape. No controller in
time: REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from broker.controller_channel import ControllerUnavailable
from broker.handlers.common import forward
from broker.handlers.context import RequestContext
from broker.security.acls import AclOperation
from broker.security.authorize import authorize_cluster
from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.messages.features import SAFE_DOWNGRADE, UPGRADE

E = ErrorCode
# the version the controller is asked at: upgrade types, validate_only and per-feature results
CONTROLLER_VERSION = 1


def _everywhere(body, code: ErrorCode, message: str) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "results": [{"feature": u.feature, "error_code": code, "error_message": message}
                        for u in body.feature_updates]}


async def handle(ctx: RequestContext) -> dict:
    body = ctx.body
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _everywhere(body, E.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    request = {
        "timeout_ms": body.timeout_ms, "validate_only": bool(body.validate_only),
        "feature_updates": [{
            "feature": u.feature, "max_version_level": u.max_version_level,
            "upgrade_type": u.upgrade_type if ctx.version >= 1 else
            (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE)} for u in body.feature_updates]}
    try:
        return dict(await forward(ctx.broker, m.UPDATE_FEATURES, CONTROLLER_VERSION, request))
    except ControllerUnavailable:
        return _everywhere(body, E.REQUEST_TIMED_OUT,
                           "No controller answered within the request timeout.")
