"""Seeded random sequences of requests, marker completions, failed appends, timeouts,
expiry and reloads against the transaction coordinator, with its invariants checked after
every step."""

import random

import pytest

from broker.transaction.coordinator import TransactionConfig, TransactionCoordinator
from broker.transaction.state import VALID_PREVIOUS_STATES, TransactionState
from protocol.errors import ErrorCode
from tests.broker.transaction.runtime import COORDINATOR_EPOCH, Runtime

E = ErrorCode
S = TransactionState
IDS = ["a", "b", "c"]
PARTITIONS = [("t", p) for p in range(4)]


def snapshot(c: TransactionCoordinator) -> dict:
    return {tid: (md.producer_id, md.producer_epoch, md.state, frozenset(md.topic_partitions))
            for tid, md in c.transactions.items()}


def fields(c: TransactionCoordinator) -> dict:
    return {tid: (md.producer_id, md.previous_producer_id, md.producer_epoch, md.txn_timeout_ms,
                  md.state, md.topic_partitions, md.txn_start_timestamp,
                  md.txn_last_update_timestamp)
            for tid, md in c.transactions.items() if md.producer_epoch >= 0}


def step(rt: Runtime, rng: random.Random, clients: list[dict]) -> None:
    fail = rng.random() < 0.1
    client = rng.choice(clients)
    tid, ident = client["tid"], client["ident"]
    action = rng.choice(["init", "init", "add", "add", "offsets", "end", "end", "markers",
                         "markers", "time", "reload"])
    if action == "init":
        pid, epoch = ident if ident is not None and rng.random() < 0.6 else (-1, -1)
        body = rt.init(tid, rng.choice([1_000, 5_000]), pid, epoch, fail_appends=fail)
        if body["error_code"] == E.NONE:
            client["ident"] = (body["producer_id"], body["producer_epoch"])
        elif body["error_code"] == E.PRODUCER_FENCED:
            client["ident"] = None
    elif action in ("add", "offsets", "end") and ident is not None:
        pid, epoch = ident
        if action == "add":
            rt.add(tid, pid, epoch, *rng.sample(PARTITIONS, rng.randint(1, 2)), fail_appends=fail)
        elif action == "offsets":
            rt.one(rt.coordinator.handle_add_offsets(None, tid, pid, epoch, rng.choice("gh"),
                                                     rt.now), fail_appends=fail)
        else:
            rt.end(tid, pid, epoch, rng.random() < 0.5, fail_appends=fail)
    elif action == "markers" and rt.markers:
        rt.write_markers(rng.randrange(len(rt.markers)))
    elif action == "time":
        rt.now += rng.randint(0, 8_000)
        rt.run(rt.coordinator.abort_timed_out(rt.now) + rt.coordinator.expire(rt.now))
    elif action == "reload":
        fresh = TransactionCoordinator(rt.config, lambda: next(rt.ids))
        markers = []
        for p in range(rt.config.num_partitions):
            fresh.begin_load(p, COORDINATOR_EPOCH)
        for key, value in rt.log:
            fresh.replay(key, value, loading=True)
        for p in range(rt.config.num_partitions):
            markers += fresh.finish_load(p)
        assert fields(fresh) == fields(rt.coordinator)  # the load path rebuilds the state
        rt.coordinator, rt.markers = fresh, markers


@pytest.mark.parametrize("seed", range(40))
def test_random_sequences_keep_the_invariants(seed):
    rng = random.Random(seed)
    rt = Runtime(TransactionConfig(num_partitions=2, transactional_id_expiration_ms=30_000))
    clients = [{"tid": tid, "ident": None} for tid in IDS for _ in range(2)]
    max_epoch: dict[int, int] = {}
    seen_states: set[S] = set()
    for _ in range(300):
        before = snapshot(rt.coordinator)
        step(rt, rng, clients)
        after = snapshot(rt.coordinator)
        for tid, md in rt.coordinator.transactions.items():
            assert md.pending is None, (tid, md)  # every transition ended
            seen_states.add(md.state)
            if md.producer_epoch >= 0:
                # an epoch never goes down for one producer id
                assert md.producer_epoch >= max_epoch.get(md.producer_id, 0), (tid, md)
                max_epoch[md.producer_id] = md.producer_epoch
            if tid not in before:
                continue
            pid, epoch, state, partitions = before[tid]
            _, _, new_state, new_partitions = after[tid]
            if new_state != state:  # the new state is reachable from the old one
                assert state in VALID_PREVIOUS_STATES[new_state], (tid, state, new_state)
            if state == new_state == S.ONGOING:  # an Ongoing transaction only grows
                assert partitions <= new_partitions, (tid, partitions, new_partitions)
        # no two producers hold one transactional id with the same producer id and epoch
        for tid in IDS:
            held = [c["ident"] for c in clients if c["tid"] == tid and c["ident"] is not None]
            assert len(held) == len(set(held)), (tid, held)
    assert S.ONGOING in seen_states, seen_states


def test_the_runs_write_every_kind_of_record():
    """The random runs are worth their invariants only if they reach every state."""
    written = set()
    for seed in range(10):
        rng = random.Random(seed)
        rt = Runtime(TransactionConfig(num_partitions=2, transactional_id_expiration_ms=30_000))
        clients = [{"tid": tid, "ident": None} for tid in IDS for _ in range(2)]
        for _ in range(300):
            step(rt, rng, clients)
        written |= {v.transaction_status if v is not None else None for _, v in rt.log}
    assert written == {S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT,
                       S.COMPLETE_ABORT, None}
