"""Client quotas live in the metadata log: altered through one broker (forwarded to the
active controller), every broker describes them; a refused alteration changes nothing on
any of them. Three combined nodes in the simulation."""

from __future__ import annotations

from protocol import messages as m
from protocol.errors import ErrorCode
from sim.scenario import Scene, run_scenario

ENTITY = [{"entity_type": "user", "entity_name": "alice"},
          {"entity_type": "client-id", "entity_name": None}]


def alteration(value: float) -> dict:
    return {"entries": [{"entity": ENTITY, "ops": [
        {"key": "producer_byte_rate", "value": value, "remove": False}]}],
        "validate_only": False}


def test_quotas_altered_through_one_broker_are_described_by_every_broker():
    async def scenario(scene: Scene) -> None:
        answer = await scene.call(1, m.ALTER_CLIENT_QUOTAS, alteration(2048.0), version=1)
        assert [e.error_code for e in answer.entries] == [ErrorCode.NONE]

        async def described(node_id: int) -> list:
            body = await scene.call(node_id, m.DESCRIBE_CLIENT_QUOTAS, {
                "components": [{"entity_type": "user", "match_type": 0, "match": "alice"}],
                "strict": False}, version=1)
            assert body.error_code == ErrorCode.NONE
            return [[(v.key, v.value) for v in entry["values"]] for entry in body.entries]

        for node in (0, 1, 2):
            await scene.wait_for(
                lambda n=node: _equals(described(n), [[("producer_byte_rate", 2048.0)]]),
                15, f"node {node} describing the quota set through node 1")
        refused = await scene.call(2, m.ALTER_CLIENT_QUOTAS, alteration(-1.0), version=1)
        assert [e.error_code for e in refused.entries] == [ErrorCode.INVALID_REQUEST]
        # nothing changed: a later alteration through another node is what every node sees
        answer = await scene.call(0, m.ALTER_CLIENT_QUOTAS, alteration(4096.0), version=1)
        assert [e.error_code for e in answer.entries] == [ErrorCode.NONE]
        for node in (0, 1, 2):
            await scene.wait_for(
                lambda n=node: _equals(described(n), [[("producer_byte_rate", 4096.0)]]),
                15, f"node {node} describing the second quota")

    run_scenario(3, 1, scenario)


async def _equals(pending, expected) -> bool:
    return await pending == expected
