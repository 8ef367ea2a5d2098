"""KIP-932 share group membership APIs: ShareGroupHeartbeat (76) and ShareGroupDescribe (77)
— translations between the wire, where assignments name topics by id, and the coordinator,
where they are names (broker.coordinator.share_group decides everything).

ShareGroupHeartbeat needs READ on the group and DESCRIBE on each subscribed topic, as
Kafka's KafkaApis.handleShareGroupHeartbeatRequest asks; a member id is required from v1
(the client chooses it), generated at v0.
"""

from __future__ import annotations

from broker.coordinator.share_group import ShareHeartbeatRequest
from broker.handlers.consumer_group import describe, heartbeat, heartbeat_refusal
from broker.handlers.context import RequestContext

CLIENT_CHOOSES_MEMBER_ID = 1


async def handle_heartbeat(ctx: RequestContext) -> dict:
    refusal = heartbeat_refusal(ctx)
    if refusal is not None:
        return refusal
    b = ctx.body
    request = ShareHeartbeatRequest(
        group_id=b.group_id, member_id=b.member_id, member_epoch=b.member_epoch,
        rack_id=b.rack_id,
        subscribed_topic_names=(list(b.subscribed_topic_names)
                                if b.subscribed_topic_names is not None else None),
        client_id=ctx.request.header.client_id or "",
        client_host="/" + ctx.peer.rsplit(":", 1)[0],
        member_id_required=ctx.version >= CLIENT_CHOOSES_MEMBER_ID)
    return await heartbeat(ctx, ctx.broker.groups.coordinator.share_group_heartbeat, request)


async def handle_describe(ctx: RequestContext) -> dict:
    return describe(ctx, ctx.broker.groups.coordinator.share_group_describe, ("assignment",))
