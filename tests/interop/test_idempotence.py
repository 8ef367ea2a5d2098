"""Idempotent produce over the wire: retries answered with the original offset, gaps refused,
and the de-duplication state survives a kill -9 restart."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode
from protocol.messages import FETCH, INIT_PRODUCER_ID, PRODUCE
from protocol.records import Record, decode_batches, encode_batch
from tests.interop.raw import Raw, create_topic

pytestmark = pytest.mark.interop


def _batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    return encode_batch([Record(i, 1_000 + i, None, v, []) for i, v in enumerate(values)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def _send(broker, topic: str, batch: bytes):
    with Raw(broker) as raw:
        body = raw.call(PRODUCE, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    p = body.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def _all_values(broker, topic: str) -> list[bytes]:
    with Raw(broker) as raw:
        body = raw.call(FETCH, 12, {"max_wait_ms": 0, "min_bytes": 0, "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                             "partition_max_bytes": 1 << 20}]}]})
    data = body.responses[0].partitions[0].records
    return [r.value for _, records in decode_batches(data) for r in records]


def test_retries_are_deduplicated_and_gaps_refused(broker, connect):
    raw = connect(broker)
    assert create_topic(raw, "idem").error_code == 0
    init = raw.call(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": -1})
    pid, epoch = init.producer_id, init.producer_epoch
    assert init.error_code == 0 and pid >= 0 and epoch == 0

    assert _send(broker, "idem", _batch(pid, epoch, 0, [b"a", b"b"])) == (0, 0)
    assert _send(broker, "idem", _batch(pid, epoch, 2, [b"c"])) == (0, 2)
    assert _send(broker, "idem", _batch(pid, epoch, 0, [b"a", b"b"])) == (0, 0)  # a retry
    assert _send(broker, "idem", _batch(pid, epoch, 5, [b"x"]))[0] == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _all_values(broker, "idem") == [b"a", b"b", b"c"]

    broker.restart(kill=True)
    assert _send(broker, "idem", _batch(pid, epoch, 2, [b"c"])) == (0, 2)  # still known
    assert _send(broker, "idem", _batch(pid, epoch, 3, [b"d"])) == (0, 3)
    assert _all_values(broker, "idem") == [b"a", b"b", b"c", b"d"]

    bumped = connect(broker).call(INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                        "transaction_timeout_ms": -1,
                                                        "producer_id": pid,
                                                        "producer_epoch": epoch})
    assert (bumped.producer_id, bumped.producer_epoch) == (pid, epoch + 1)
    assert _send(broker, "idem", _batch(pid, epoch + 1, 1, [b"gap"]))[0] == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # a new epoch must start at sequence 0
    assert _send(broker, "idem", _batch(pid, epoch + 1, 0, [b"e"])) == (0, 4)
    assert _send(broker, "idem", _batch(pid, epoch, 4, [b"old"]))[0] == \
        ErrorCode.INVALID_PRODUCER_EPOCH  # the old epoch is fenced
    assert _all_values(broker, "idem") == [b"a", b"b", b"c", b"d", b"e"]


def test_producer_ids_are_never_reused_across_restarts(broker, connect):
    def new_pid():
        return connect(broker).call(INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                      "transaction_timeout_ms": -1}).producer_id
    before = {new_pid() for _ in range(3)}
    broker.restart(kill=True)
    after = {new_pid() for _ in range(3)}
    assert len(before) == 3 and not before & after
