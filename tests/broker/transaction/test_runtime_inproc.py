"""The transaction coordinator served by an in-process broker: FindCoordinator key type 1
creates __transaction_state, InitProducerId with a transactional id hands out ids and
fences, the requests of a transaction are checked, and the state survives a restart (the
coordinator reloads its partition)."""

from __future__ import annotations


import trio

from broker.coordinator.runtime import Waiter
from broker.storage import REAL
from client.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import (
    ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, DESCRIBE_TRANSACTIONS, END_TXN, FIND_COORDINATOR,
    INIT_PRODUCER_ID, LIST_TRANSACTIONS, PRODUCE, TXN_OFFSET_COMMIT,
)
from protocol.records import Record, encode_batch, parse_batch_header
from tests.inproc import in_process_broker

E = ErrorCode
TXN = "txn-1"


async def _connect(nursery, inproc) -> BrokerConnection:
    conn = BrokerConnection(inproc.broker.advertised.host, inproc.broker.advertised.port)
    await conn.open(nursery)
    return conn


async def _init(conn, transactional_id=TXN, producer_id=-1, producer_epoch=-1):
    resp = await conn.request(INIT_PRODUCER_ID, {
        "transactional_id": transactional_id, "transaction_timeout_ms": 60_000,
        "producer_id": producer_id, "producer_epoch": producer_epoch})
    return resp.body


async def _coordinator_found(conn, key: str, key_type: int) -> None:
    """FindCoordinator until it answers (the internal topic made and loaded), as clients
    retry it."""
    with trio.fail_after(30):
        while True:
            resp = await conn.request(FIND_COORDINATOR, {"key": key, "key_type": key_type,
                                                         "coordinator_keys": [key]})
            (entry,) = resp.body.coordinators
            if entry.error_code == E.NONE:
                return
            await trio.sleep(0.1)


async def _ready(conn) -> None:
    """The transaction coordinator found and answering InitProducerId."""
    await _coordinator_found(conn, TXN, 1)
    with trio.fail_after(30):
        while True:
            if (await _init(conn, "probe")).error_code == E.NONE:
                return
            await trio.sleep(0.1)  # a client's retry backoff


async def _add(conn, producer_id, epoch, topic="t", partitions=(0,)):
    resp = await conn.request(ADD_PARTITIONS_TO_TXN, {
        "v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": producer_id,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": list(partitions)}]}, version=3)
    return {(t.name, r.partition_index): ErrorCode(r.partition_error_code)
            for t in resp.body.results_by_topic_v3_and_below for r in t.results_by_partition}


async def _end(conn, producer_id, epoch, committed=True):
    resp = await conn.request(END_TXN, {"transactional_id": TXN, "producer_id": producer_id,
                                        "producer_epoch": epoch, "committed": committed})
    return ErrorCode(resp.body.error_code)


async def test_find_coordinator_creates_the_transaction_log_and_answers_with_this_broker(
        inproc, autojump_clock):
    async with trio.open_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        await _ready(conn)
        resp = await conn.request(FIND_COORDINATOR, {"key": TXN, "key_type": 1,
                                                     "coordinator_keys": [TXN]})
        (entry,) = resp.body.coordinators
        assert (entry.error_code, entry.node_id) == (E.NONE, inproc.broker.node_id)
        topic = inproc.broker.metadata_cache.topic("__transaction_state")
        assert topic is not None and len(topic.partitions) == 1
        nursery.cancel_scope.cancel()


async def test_a_second_init_fences_the_first_producer(inproc, autojump_clock):
    await inproc.create_topic("t", 1)
    async with trio.open_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        await _ready(conn)
        first = await _init(conn)
        assert first.error_code == E.NONE and first.producer_epoch == 0
        second = await _init(conn)
        assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
        # the first producer's epoch is stale now
        assert await _add(conn, first.producer_id, 0) == {("t", 0): E.PRODUCER_FENCED}
        assert await _add(conn, second.producer_id, 1) == {("t", 0): E.NONE}
        nursery.cancel_scope.cancel()


async def test_bad_requests_answer_kafkas_codes_and_change_nothing(inproc, autojump_clock):
    await inproc.create_topic("t", 1)
    async with trio.open_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        await _ready(conn)
        ids = await _init(conn)
        pid, epoch = ids.producer_id, ids.producer_epoch
        # nothing open: neither commit nor abort
        assert await _end(conn, pid, epoch) == E.INVALID_TXN_STATE
        # a producer id the coordinator did not hand out for this id
        assert await _add(conn, pid + 1000, epoch) == {("t", 0): E.INVALID_PRODUCER_ID_MAPPING}
        # a partition that does not exist, beside one that does: the other is not attempted
        assert await _add(conn, pid, epoch, "t", (0, 7)) == {
            ("t", 7): E.UNKNOWN_TOPIC_OR_PARTITION, ("t", 0): E.OPERATION_NOT_ATTEMPTED}
        resp = await conn.request(ADD_OFFSETS_TO_TXN, {
            "transactional_id": TXN, "producer_id": pid, "producer_epoch": epoch + 5,
            "group_id": "g"})
        assert resp.body.error_code == E.PRODUCER_FENCED
        # a timeout past transaction.max.timeout.ms
        resp = await conn.request(INIT_PRODUCER_ID, {
            "transactional_id": TXN, "transaction_timeout_ms": 900_001, "producer_id": -1,
            "producer_epoch": -1})
        assert resp.body.error_code == E.INVALID_TRANSACTION_TIMEOUT
        # and after all of it the transaction is still empty and usable
        md = inproc.broker.transactions.coordinator.transactions[TXN]
        assert (md.producer_id, md.producer_epoch, md.state.value) == (pid, epoch, "Empty")
        assert await _add(conn, pid, epoch) == {("t", 0): E.NONE}
        assert inproc.broker.transactions.coordinator.transactions[TXN].state.value == "Ongoing"
        nursery.cancel_scope.cancel()


async def test_the_coordinator_reloads_its_transactions_after_a_restart(tmp_path, autojump_clock):
    async with in_process_broker(tmp_path, fs=REAL) as inproc:
        await inproc.create_topic("t", 1)
        async with trio.open_nursery() as nursery:
            conn = await _connect(nursery, inproc)
            await _ready(conn)
            ids = await _init(conn)
            assert await _add(conn, ids.producer_id, ids.producer_epoch) == {("t", 0): E.NONE}
            nursery.cancel_scope.cancel()
    async with in_process_broker(tmp_path, fs=REAL) as inproc:
        async with trio.open_nursery() as nursery:
            conn = await _connect(nursery, inproc)
            await _ready(conn)
            md = inproc.broker.transactions.coordinator.transactions[TXN]
            assert (md.producer_id, md.producer_epoch, md.state.value) == (
                ids.producer_id, ids.producer_epoch, "Ongoing")
            assert md.topic_partitions == {("t", 0)}
            # a new producer with the same id aborts the reloaded transaction first
            again = await _init(conn)
            assert again.error_code == E.CONCURRENT_TRANSACTIONS
            nursery.cancel_scope.cancel()


async def test_describe_and_list_transactions_show_an_open_transaction(inproc, autojump_clock):
    await inproc.create_topic("t", 2)
    async with trio.open_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        await _ready(conn)
        ids = await _init(conn)
        assert await _add(conn, ids.producer_id, 0, "t", (1, 0)) == {
            ("t", 1): E.NONE, ("t", 0): E.NONE}
        resp = await conn.request(DESCRIBE_TRANSACTIONS, {"transactional_ids": [TXN, "nope"]})
        mine, unknown = resp.body.transaction_states
        assert (mine.error_code, mine.transaction_state, mine.producer_id) == (
            E.NONE, "Ongoing", ids.producer_id)
        assert [(t.topic, list(t.partitions)) for t in mine.topics] == [("t", [0, 1])]
        assert unknown.error_code == E.TRANSACTIONAL_ID_NOT_FOUND

        async def listed(**filters):
            body = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1,
                    "transactional_id_pattern": None, **filters}
            resp = await conn.request(LIST_TRANSACTIONS, body)
            return resp.body, {s.transactional_id: s.transaction_state
                               for s in resp.body.transaction_states}

        _, every = await listed()
        assert every == {TXN: "Ongoing", "probe": "Empty"}
        assert (await listed(state_filters=["Ongoing"]))[1] == {TXN: "Ongoing"}
        body, found = await listed(state_filters=["Sleeping"])
        assert (list(body.unknown_state_filters), found) == (["Sleeping"], {})
        assert (await listed(producer_id_filters=[ids.producer_id]))[1] == {TXN: "Ongoing"}
        assert (await listed(transactional_id_pattern="pro.*"))[1] == {"probe": "Empty"}
        assert (await listed(transactional_id_pattern="("))[0].error_code == \
            E.INVALID_REGULAR_EXPRESSION
        nursery.cancel_scope.cancel()


async def _produce_txn(conn, pid, epoch, seq, value, version=None):
    batch = encode_batch([Record(0, 1_000, None, value, [])], producer_id=pid,
                         producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    resp = await conn.request(PRODUCE, {
        "transactional_id": TXN, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": batch}]}]},
        version=version)
    return ErrorCode(resp.body.responses[0].partition_responses[0].error_code)


async def test_kip890_a_partition_never_added_or_a_late_write_is_refused(inproc, autojump_clock):
    await inproc.create_topic("t", 1)
    async with trio.open_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        await _ready(conn)
        ids = await _init(conn)
        pid, epoch = ids.producer_id, ids.producer_epoch
        partition = inproc.broker.partition("t", 0)
        # never added to the transaction: refused, nothing written, the LSO not held
        assert await _produce_txn(conn, pid, epoch, 0, b"stray") == E.TRANSACTION_ABORTABLE
        assert await _produce_txn(conn, pid, epoch, 0, b"stray", version=9) == \
            E.INVALID_TXN_STATE
        assert partition.log_end_offset == 0
        # added: accepted; committed: the markers end it
        assert await _add(conn, pid, epoch) == {("t", 0): E.NONE}
        assert await _produce_txn(conn, pid, epoch, 0, b"kept") == E.NONE
        assert partition.last_stable_offset == 0  # held by the open transaction
        assert await _end(conn, pid, epoch) == E.NONE
        coordinator = inproc.broker.transactions.coordinator
        with trio.fail_after(10):
            while coordinator.transactions[TXN].state.value != "CompleteCommit":
                await inproc.broker.wait_for_data([("__transaction_state", 0)])
        assert partition.last_stable_offset == partition.high_watermark == 2  # data + marker
        # a retry of the committed transaction's write arriving late: no new transaction
        assert await _produce_txn(conn, pid, epoch, 1, b"late") == E.TRANSACTION_ABORTABLE
        assert partition.log_end_offset == 2
        assert partition.last_stable_offset == 2
        nursery.cancel_scope.cancel()


async def test_kip890_a_guard_withdrawn_by_a_marker_refuses_the_append(inproc, autojump_clock):
    """The race KIP-890 closes: verified, then the transaction ended (its marker written)
    before the append; the append must not open a transaction."""
    await inproc.create_topic("t", 1)
    partition = inproc.broker.partition("t", 0)
    guard = partition.start_verification(7)
    result = partition.append_control_batch(7, 0, 0, True, 1_000)  # the marker, meanwhile
    assert result.error == E.NONE
    batch = bytearray(encode_batch([Record(0, 1_000, None, b"late", [])], producer_id=7,
                                   producer_epoch=0, base_sequence=0, is_transactional=True))
    late = partition.append_batch(batch, parse_batch_header(batch), 1_000, verification=guard)
    assert late.error == E.INVALID_TXN_STATE
    assert partition.log_end_offset == 1
    fresh = partition.start_verification(7)
    assert partition.append_batch(batch, parse_batch_header(batch), 1_000,
                                  verification=fresh).error == E.NONE


async def test_adding_to_the_next_transaction_waits_for_the_last_ones_markers(autojump_clock):
    """The coordinator answers CONCURRENT_TRANSACTIONS while the previous transaction's
    markers are written; the handler parks the request until they are and answers what the
    coordinator says then, so the producer is not left to its retry backoff. Without a
    transaction being ended, it does not wait."""
    from broker.handlers.transactions import _call_once_markers_written

    class Runtime:
        def __init__(self, answers, ending):
            self.answers, self.ending, self.calls, self.parked = list(answers), ending, 0, 0

        async def call(self, operation, *args):
            self.calls += 1
            waiter = Waiter()
            waiter.resolve({"error_code": self.answers.pop(0)})
            return waiter

        async def call_when_completed(self, transactional_id, timeout_s, operation, *args):
            self.parked += 1
            return await self.call(operation, *args) if self.ending else None

    waited = Runtime([E.CONCURRENT_TRANSACTIONS, E.NONE], ending=True)
    assert await _call_once_markers_written(waited, TXN, None) == E.NONE
    assert (waited.calls, waited.parked) == (2, 1)
    nothing_ending = Runtime([E.CONCURRENT_TRANSACTIONS], ending=False)
    assert await _call_once_markers_written(nothing_ending, TXN, None) == \
        E.CONCURRENT_TRANSACTIONS
    assert nothing_ending.calls == 1
    fenced = Runtime([E.PRODUCER_FENCED], ending=True)
    assert await _call_once_markers_written(fenced, TXN, None) == E.PRODUCER_FENCED
    assert fenced.parked == 0


async def test_the_next_transactions_add_is_parked_and_follows_the_complete_record(
        inproc, autojump_clock, monkeypatch):
    """An AddPartitionsToTxn that meets the last transaction's markers being written is
    not answered until they are; then it runs in the same step as the Complete record, so
    its Ongoing record is the very next one in the log, appended before any other task
    (a follower's fetch among them) can run."""
    from broker.transaction.markers import MarkerWriter

    await inproc.create_topic("t", 1)
    release = trio.Event()
    write = MarkerWriter.write

    async def held_write(self, effect, still_coordinator):
        await release.wait()
        return await write(self, effect, still_coordinator)

    monkeypatch.setattr(MarkerWriter, "write", held_write)
    async with trio.open_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        await _ready(conn)
        ids = await _init(conn)
        pid, epoch = ids.producer_id, ids.producer_epoch
        assert await _add(conn, pid, epoch) == {("t", 0): E.NONE}
        assert await _end(conn, pid, epoch) == E.NONE  # PrepareCommit; markers held
        answers = []
        answered = trio.Event()

        async def add_next():
            answers.append(await _add(conn, pid, epoch))
            answered.set()

        nursery.start_soon(add_next)
        await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(1)
        assert answers == []  # parked, not told CONCURRENT_TRANSACTIONS
        state_log = inproc.broker.partition("__transaction_state", 0)
        before = state_log.log_end_offset
        runtime = inproc.broker.transactions
        after_complete = []  # the log's end once the step that wrote CompleteCommit is over
        apply_effects = runtime.apply_effects

        def apply_and_look(effects, *rest):
            effects = list(effects)
            error = apply_effects(effects, *rest)
            if any(getattr(getattr(e, "value", None), "transaction_status", None) is not None
                   and e.value.transaction_status.value == "CompleteCommit" for e in effects):
                after_complete.append(state_log.log_end_offset)
            return error

        monkeypatch.setattr(runtime, "apply_effects", apply_and_look)
        release.set()
        with trio.fail_after(10):
            await answered.wait()
        assert answers == [{("t", 0): E.NONE}]
        assert state_log.log_end_offset == before + 2  # CompleteCommit, then Ongoing
        assert after_complete == [before + 2]  # the Ongoing record went in the same step
        assert runtime.coordinator.transactions[TXN].state.value == "Ongoing"
        nursery.cancel_scope.cancel()


async def _txn_offset_commit(conn, group, pid, epoch, offset, version=None):
    resp = await conn.request(TXN_OFFSET_COMMIT, {
        "transactional_id": TXN, "group_id": group, "producer_id": pid,
        "producer_epoch": epoch, "generation_id": -1, "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [{
            "partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
            "committed_metadata": ""}]}]}, version=version)
    ((topic,),) = [resp.body.topics]
    (partition,) = topic.partitions
    return ErrorCode(partition.error_code)


async def test_kip890_a_txn_offset_commit_is_verified_like_a_produce(inproc, autojump_clock):
    """Offsets for a transaction that never added the group's partition (no
    AddOffsetsToTxn), or whose transaction has ended, are refused before anything reaches
    __consumer_offsets, so no transaction hangs there holding its LSO; added, they go in."""
    group = "g-verified"
    await inproc.create_topic("t", 1)
    async with trio.open_nursery() as nursery:
        conn = await _connect(nursery, inproc)
        await _ready(conn)
        await _coordinator_found(conn, group, 0)
        ids = await _init(conn)
        pid, epoch = ids.producer_id, ids.producer_epoch
        runtime = inproc.broker.groups
        offsets = inproc.broker.partition(runtime.topic,
                                          runtime.coordinator.partition_for(group))
        before = offsets.log_end_offset
        # never added: refused, in the form the client's version knows
        assert await _txn_offset_commit(conn, group, pid, epoch, 5) == E.TRANSACTION_ABORTABLE
        assert await _txn_offset_commit(conn, group, pid, epoch, 5, version=3) == \
            E.INVALID_TXN_STATE
        assert offsets.log_end_offset == before
        assert offsets.last_stable_offset == offsets.high_watermark
        # added with AddOffsetsToTxn: accepted, and committed by the marker
        resp = await conn.request(ADD_OFFSETS_TO_TXN, {
            "transactional_id": TXN, "producer_id": pid, "producer_epoch": epoch,
            "group_id": group})
        assert resp.body.error_code == E.NONE
        assert await _txn_offset_commit(conn, group, pid, epoch, 5) == E.NONE
        assert offsets.log_end_offset == before + 1
        assert await _end(conn, pid, epoch) == E.NONE
        coordinator = inproc.broker.transactions.coordinator
        with trio.fail_after(10):
            while coordinator.transactions[TXN].state.value != "CompleteCommit":
                await inproc.broker.wait_for_data([("__transaction_state", 0)])
        end = offsets.log_end_offset  # the offsets record and the marker
        # a late retry of the ended transaction's commit: refused, nothing new is open
        assert await _txn_offset_commit(conn, group, pid, epoch, 9) == E.TRANSACTION_ABORTABLE
        assert offsets.log_end_offset == end
        assert offsets.last_stable_offset == offsets.high_watermark == end
        nursery.cancel_scope.cancel()
