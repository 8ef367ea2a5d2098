"""BrokerLifecycle's initial catch-up (Kafka's initialCatchUpFuture) and readyToUnfence:
the catch-up comes once, when the broker is registered and its metadata cache has applied
the entry of its registration (whose offset is the broker epoch), whichever of the two
comes last; heartbeats ask to stay fenced until the broker is ready to unfence."""

from __future__ import annotations

from broker.config import BrokerConfig
from broker.controller_channel import ControllerChannel
from broker.lifecycle import BrokerLifecycle, caught_up_past_registration
from broker.listeners import NodeAddresses
from broker.metadata_cache import MetadataCache


def lifecycle(tmp_path) -> tuple[BrokerLifecycle, list[int]]:
    config = BrokerConfig.load({}, None, **{"broker.id": 1, "log.dirs": str(tmp_path),
                                            "listeners": "127.0.0.1:0"})
    cache = MetadataCache("cluster")
    life = BrokerLifecycle(config, NodeAddresses.resolve(config), cache,
                           ControllerChannel(None, None, 1.0))
    told: list[int] = []
    life.catch_up_listeners.append(lambda: told.append(cache.offset))
    return life, told


def test_caught_up_only_once_the_registrations_entry_is_applied():
    assert not caught_up_past_registration(-1, 100)  # not registered
    assert not caught_up_past_registration(40, 40)  # entries below 40 applied, not 40's
    assert caught_up_past_registration(40, 41)
    assert caught_up_past_registration(0, 1)


def test_the_catch_up_waits_for_the_registration_then_for_its_entry(tmp_path):
    life, told = lifecycle(tmp_path)
    life.cache.offset = 500  # a restart's replay applied: no registration of this process
    life.metadata_applied()
    assert not told and not life.initial_catch_up.is_set()
    life.broker_epoch = 520  # registered; its entry not applied here yet
    life.metadata_applied()
    life.cache.offset = 520  # the entries below it
    life.metadata_applied()
    assert not told
    life.cache.offset = 521
    life.metadata_applied()
    life.cache.offset = 530
    life.metadata_applied()
    assert told == [521] and life.initial_catch_up.is_set()


def test_a_registration_answered_after_its_entry_was_applied_catches_up_at_once(tmp_path):
    life, told = lifecycle(tmp_path)
    life.cache.offset = 600
    life.broker_epoch = 590  # as _register sets it, then looks
    life._maybe_caught_up()
    assert told == [600]


def test_heartbeats_ask_to_stay_fenced_until_ready_to_unfence(tmp_path):
    life, _ = lifecycle(tmp_path)
    life.broker_epoch = 10
    assert life._heartbeat()["want_fence"] is True
    life.set_ready_to_unfence()
    assert life._heartbeat()["want_fence"] is False


async def test_a_registration_refused_as_a_duplicate_is_tried_again_soon(tmp_path,
                                                                        autojump_clock):
    """A process restarted after kill -9 is refused while its old session lives (the
    controller alone knows until when): it asks again every DUPLICATE_RETRY_S, not every
    heartbeat interval (2 s), so it registers within that much of the session's end."""
    import trio

    from broker.lifecycle import DUPLICATE_RETRY_S
    from protocol.errors import ErrorCode

    life, _ = lifecycle(tmp_path)
    session_ends = 3.0
    asked: list[float] = []
    accepted = trio.Event()

    class Channel:
        async def forward(self, api_key, version, body):
            now = trio.current_time()
            asked.append(now)
            code = ErrorCode.DUPLICATE_BROKER_REGISTRATION if now < session_ends else 0
            if code == 0:
                accepted.set()
            return {"error_code": int(code), "broker_epoch": 7 if code == 0 else -1,
                    "is_fenced": True}

    life.channel = Channel()
    async with trio.open_nursery() as nursery:
        await nursery.start(life.run)
        with trio.fail_after(10):
            await accepted.wait()
        registered_at = asked[[i for i, t in enumerate(asked) if t >= session_ends][0]]
        nursery.cancel_scope.cancel()
    assert life.broker_epoch == 7
    assert registered_at - session_ends <= DUPLICATE_RETRY_S + 1e-9
    assert len([t for t in asked if t < session_ends]) >= session_ends / DUPLICATE_RETRY_S


def test_heartbeats_report_the_last_entry_applied_as_kafka_does(tmp_path):
    """The controller counts a broker caught up once current_metadata_offset >= its epoch
    (the offset of its RegisterBrokerRecord), and lets a controlled shutdown finish once
    every active broker reports >= the shutdown's first entry: the offset must be that of
    the last entry applied, not the one after it."""
    life, _ = lifecycle(tmp_path)
    life.broker_epoch = 40
    life.cache.offset = 40  # entries 0-39 applied; the registration's, 40, not yet
    assert life._heartbeat()["current_metadata_offset"] == 39
    life.cache.offset = 41
    assert life._heartbeat()["current_metadata_offset"] == 40
