"""The quorum runtime around the pure pieces: commits reach listeners once, a controller
operation answers only when its entry commits, and a leader that resigned stops acting as
the active controller instead of failing on its next append."""

import random
import uuid

import pytest
import trio

from broker.controller import raft
from broker.controller.metadata_log import MetadataLogStore
from broker.controller.image import MetadataImage, MetadataImageError
from broker.controller.controller_result import ControllerResult
from broker.controller.quorum_controller import ControllerSettings, QuorumController
from broker.controller.runtime import APPEND_CHUNK, NotController, QuorumRuntime, decode_entry
from protocol.errors import ErrorCode
from tests.broker.controller.test_runtime_snapshots import VOTERS, Network, make_runtime, wait_for
from protocol.messages import BROKER_REGISTRATION, request_body
from protocol.metadata_records import MetadataRecordType as T


REGISTRATION = request_body(BROKER_REGISTRATION, 0, {
    "broker_id": 0, "cluster_id": "c", "incarnation_id": uuid.uuid4(),
    "listeners": [{"name": "PLAINTEXT", "host": "h", "port": 1, "security_protocol": 0}],
    "features": [], "rack": None})


def runtime_of(tmp_path, voters=(0,)) -> QuorumRuntime:
    store = MetadataLogStore.open(tmp_path / "__cluster_metadata-0")
    node = raft.RaftNode(0, raft.QuorumConfig(voters=voters), random.Random(1),
                         election=store.election, log=store.raft_log)
    controller = QuorumController(ControllerSettings(node_id=0, voters=voters),
                                  random.Random(2))
    return QuorumRuntime(node, store, controller, None)


def elect_three(runtime: QuorumRuntime) -> None:
    """Make node 0 of voters (0, 1, 2) leader with one granted pre-vote and then one
    granted vote, no network."""
    node = runtime.node
    runtime._apply(node.start(0))
    effects = node.tick(node.next_deadline())
    runtime._apply(effects)
    for _ in ("pre-vote", "vote"):
        request = next(e for e in effects if isinstance(e, raft.Send) and e.destination == 1)
        effects = node.receive(1, request.correlation_id,
                               raft.VoteResponse(ErrorCode.NONE, -1, node.epoch, True),
                               node.next_deadline())
        runtime._apply(effects)
    assert node.is_leader and runtime.active


async def test_a_single_voter_commits_and_answers_with_each_entry_once(tmp_path):
    runtime = runtime_of(tmp_path)
    seen = []
    runtime.listeners.append(lambda offset, records, image: seen.append(
        (offset, [t for t, _, _ in records])))
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        assert runtime.active
        response = await runtime.submit(
            lambda c, now, offset: c.register_broker(REGISTRATION, now, offset))
        assert response["error_code"] == 0
        # answered only once committed, and so already applied by the listeners
        assert runtime.committed_image.brokers[0].epoch == response["broker_epoch"]
        nursery.cancel_scope.cancel()
    types = [t for _, ts in seen for t in ts]
    assert types.count(T.REGISTER_BROKER_RECORD) == 1
    assert [o for o, _ in seen] == sorted({o for o, _ in seen})


async def test_a_leader_that_resigned_refuses_operations_as_not_controller(tmp_path):
    runtime = runtime_of(tmp_path, voters=(0, 1, 2))
    elect_three(runtime)
    runtime.resign()  # EndQuorumEpoch: no other leader is known yet
    assert not runtime.node.is_leader and not runtime.active
    with pytest.raises(NotController):
        await runtime.submit(lambda c, now, offset: c.allocate_producer_ids(0, 1))


async def test_a_restart_publishes_the_replayed_log_as_one_delta_then_entry_by_entry(tmp_path):
    """What the log already held reaches the listeners as one call, from the empty image to
    the committed one (Kafka's MetadataLoader catching up), so the local replicas never see
    the history's intermediate states (a partition's first leader epoch among them)."""
    async def register_twice(runtime: QuorumRuntime) -> None:
        for _ in range(2):  # a new incarnation: a second record and a new broker epoch
            body = request_body(BROKER_REGISTRATION, 0, {
                **{k: REGISTRATION[k] for k in ("broker_id", "cluster_id", "listeners",
                                                 "features", "rack")},
                "incarnation_id": uuid.uuid4()})
            await runtime.submit(lambda c, now, offset, b=body: c.register_broker(b, now, offset))

    first = runtime_of(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        await register_twice(first)
        nursery.cancel_scope.cancel()
    first.store.close()
    epoch_before = first.committed_image.brokers[0].epoch

    runtime = runtime_of(tmp_path)
    calls = []
    runtime.listeners.append(lambda offset, records, image: calls.append(
        (runtime.catching_up, [t for t, _, _ in records], image.brokers[0].epoch
         if 0 in image.brokers else None)))
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        assert calls, "the replay was not published"
        catching_up, types, epoch = calls[0]
        assert catching_up and types.count(T.REGISTER_BROKER_RECORD) == 2
        assert epoch == epoch_before
        assert not runtime.catching_up
        published = len(calls)
        await register_twice(runtime)
        nursery.cancel_scope.cancel()
    later = calls[published:]
    assert [types.count(T.REGISTER_BROKER_RECORD) for _, types, _ in later
            if T.REGISTER_BROKER_RECORD in types] == [1, 1]
    assert not any(catching_up for catching_up, _, _ in later)
    runtime.store.close()


async def test_a_long_replay_leaves_the_loop_free_to_answer_the_quorum(tmp_path, monkeypatch):
    """A restart's replay goes in slices, one per turn of the run loop: a Raft request that
    arrives meanwhile is answered before the replay ends (a stalled loop would let the
    node's own timers lapse and leave the other voters unanswered), and the listeners still
    get the whole replay as one delta."""
    from broker.controller import runtime as runtime_module
    first = runtime_of(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        for _ in range(6):  # six incarnations: six registration records
            body = request_body(BROKER_REGISTRATION, 0, {
                **{k: REGISTRATION[k] for k in ("broker_id", "cluster_id", "listeners",
                                                 "features", "rack")},
                "incarnation_id": uuid.uuid4()})
            await first.submit(lambda c, now, offset, b=body: c.register_broker(b, now, offset))
        nursery.cancel_scope.cancel()
    first.store.close()
    expected = first.committed_image
    logged = sum(len(runtime_module.decode_entry(e.record))
                 for e in first.node.log.read(0, 1 << 62) if not e.control)
    assert logged > 6

    monkeypatch.setattr(runtime_module, "COMMIT_SLICE_RECORDS", 1)
    runtime = runtime_of(tmp_path)
    published = trio.Event()
    deltas = []

    def listener(offset, records, image):
        deltas.append((runtime.catching_up, len(records)))
        published.set()

    runtime.listeners.append(listener)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        assert runtime.catching_up and not deltas  # the first slice only
        vote = raft.VoteRequest(runtime.node.epoch, 5, 0, 0, 0, pre_vote=True)
        answer = await runtime.handle_raft_request(5, vote, 5.0)
        assert isinstance(answer, raft.VoteResponse)
        assert runtime.catching_up  # answered mid-replay
        with trio.fail_after(10):
            await published.wait()
        nursery.cancel_scope.cancel()
    assert deltas[0] == (True, logged)  # one delta, every record of the log
    assert runtime.committed_image == expected
    runtime.store.close()


def topic_entry(name: str, partitions: int) -> ControllerResult:
    """An operation's result: a topic and its partitions (led by broker 0), one entry."""
    topic_id = uuid.uuid4()
    records = [(int(T.TOPIC_RECORD), 0, {"name": name, "topic_id": topic_id})] + [
        (int(T.PARTITION_RECORD), 0, {"partition_id": i, "topic_id": topic_id,
                                      "replicas": [0], "isr": [0], "leader": 0})
        for i in range(partitions)]
    return ControllerResult(tuple(records), {"created": name})


async def wait_until(predicate, turns: int = 10_000) -> None:
    for _ in range(turns):
        if predicate():
            return
        await trio.lowlevel.checkpoint()
    raise AssertionError("condition not met")


LARGE = 3 * APPEND_CHUNK + 1  # partitions: an entry prepared over several turns


async def test_a_large_entry_is_prepared_over_several_turns_and_commits_as_one(tmp_path):
    """The event loop serves other tasks between the chunks of a large entry's encoding and
    replay, and the entry still commits whole, its image the one a standby replaying the
    log builds."""
    runtime = runtime_of(tmp_path)
    published = []
    runtime.listeners.append(lambda offset, records, image: published.append(records))
    turns_while_preparing = 0

    async def other_work(done: trio.Event) -> None:
        nonlocal turns_while_preparing
        while not done.is_set():
            if runtime._preparing is not None:
                turns_while_preparing += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        done = trio.Event()
        nursery.start_soon(other_work, done)
        response = await runtime.submit(lambda c, now, offset: topic_entry("big", LARGE))
        done.set()
        assert response == {"created": "big"}
        nursery.cancel_scope.cancel()
    assert turns_while_preparing >= 2
    entries = [records for records in published
               if any(t == T.PARTITION_RECORD for t, _, _ in records)]
    assert len(entries) == 1 and len(entries[0]) == LARGE + 1
    topic = runtime.committed_image.topic("big")
    assert topic is not None and sorted(topic.partitions) == list(range(LARGE))
    replayed = MetadataImage.EMPTY
    for entry in runtime.node.log.read(runtime.node.log.start_offset, 1 << 62):
        if not entry.control:
            replayed = replayed.replay(decode_entry(entry.record))
    assert replayed == runtime.committed_image == runtime.controller.image
    runtime.store.close()


async def test_an_operation_submitted_while_a_large_entry_is_prepared_runs_after_it(tmp_path):
    """One operation at a time: the second decides on the image the large one left."""
    runtime = runtime_of(tmp_path)
    seen: list[bool] = []

    def second(c, now, offset):
        seen.append(c.image.topic("big") is not None)
        return topic_entry("small", 1)

    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        nursery.start_soon(runtime.submit, lambda c, now, offset: topic_entry("big", LARGE))
        await wait_until(lambda: runtime._preparing is not None)
        assert await runtime.submit(second) == {"created": "small"}
        nursery.cancel_scope.cancel()
    assert seen == [True]
    big, small = runtime.committed_image.topic("big"), runtime.committed_image.topic("small")
    assert big is not None and small is not None
    runtime.store.close()


async def test_a_large_entry_whose_leadership_is_lost_while_prepared_is_not_appended(tmp_path):
    runtime = runtime_of(tmp_path, voters=(0, 1, 2))
    elect_three(runtime)
    end = runtime.node.log.end_offset
    outcome: list[BaseException] = []

    async def create() -> None:
        try:
            await runtime.submit(lambda c, now, offset: topic_entry("big", LARGE))
        except NotController as e:
            outcome.append(e)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(create)
        await wait_until(lambda: runtime._preparing is not None)
        runtime.resign()
    assert len(outcome) == 1
    assert runtime.node.log.end_offset == end
    assert runtime.controller is not None and runtime.controller.image.topic("big") is None
    runtime.store.close()


async def test_followers_commit_a_large_entry_over_several_turns_and_publish_it_once(
        tmp_path):
    """A follower decodes and replays another controller's large entry a chunk per turn of
    the event loop too, then publishes it whole; every voter ends with the same image.
    (Trio's real clock: a task taking a turn at every checkpoint would stop an autojump
    clock from reaching Raft's timers.)"""
    network = Network()
    runtimes = {i: make_runtime(tmp_path / str(i), i, VOTERS) for i in VOTERS}
    published: dict[int, list[list]] = {i: [] for i in VOTERS}
    for i, r in runtimes.items():
        r.listeners.append(lambda offset, records, image, i=i: published[i].append(records))
    turns_while_decoding = 0

    async def other_work(done: trio.Event) -> None:
        nonlocal turns_while_decoding
        while not done.is_set():
            if any(r._decoding is not None for r in runtimes.values()):
                turns_while_decoding += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for r in runtimes.values():
            await network.start(nursery, r)
        await wait_for(lambda: network.leader() is not None)
        done = trio.Event()
        nursery.start_soon(other_work, done)
        await network.submit(lambda c, now, offset: topic_entry("big", LARGE))
        leader = network.leader()
        assert leader is not None
        await wait_for(lambda: all(r.applied_offset >= leader.applied_offset
                                   and r.committed_image.topic("big") is not None
                                   for r in runtimes.values()))
        done.set()
        nursery.cancel_scope.cancel()
    assert turns_while_decoding >= 2
    for i, r in runtimes.items():
        entries = [records for records in published[i]
                   if any(t == T.PARTITION_RECORD for t, _, _ in records)]
        assert [len(e) for e in entries] == [LARGE + 1], i
        assert r.committed_image == leader.committed_image
        r.store.close()


async def test_a_large_entry_with_a_record_the_image_refuses_fails_and_appends_nothing(
        tmp_path):
    """The operation leaves a large entry's replay to the runtime; a record the image
    refuses fails the operation there, before anything is appended."""
    runtime = runtime_of(tmp_path)
    entry = topic_entry("big", LARGE)
    refused = (int(T.PARTITION_CHANGE_RECORD), 0, {
        "partition_id": LARGE + 5, "topic_id": entry.records[0][2]["topic_id"], "leader": 0})
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        end, image = runtime.node.log.end_offset, runtime.controller.image
        with pytest.raises(MetadataImageError):
            await runtime.submit(lambda c, now, offset: ControllerResult(
                entry.records + (refused,), None))
        assert runtime.node.log.end_offset == end
        assert runtime.controller.image is image
        # and the next operation runs
        assert await runtime.submit(lambda c, now, offset: topic_entry("small", 1)) == {
            "created": "small"}
        nursery.cancel_scope.cancel()
    runtime.store.close()


async def test_the_runtime_clock_reads_a_deadline_as_due_once_woken_at_it(autojump_clock):
    """The run loop waits with move_on_at(D / 1000) for a deadline of D ms, then ticks what
    is due at now_ms(). Woken at D / 1000 s, now_ms() must read D: truncated, it read
    D - 1 for some D, nothing was due, and the loop woke at once again (for ever on a
    simulated clock, whose time moves only when every task waits)."""
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, trio.testing.MockClock)
    for deadline_ms in range(1, 5000, 7):
        await trio.sleep_until(deadline_ms / 1000)
        assert QuorumRuntime.now_ms() == deadline_ms
