"""Share groups (KIP-932) in the whole-cluster simulation: two members of a share group (our
ShareConsumer, explicit ACCEPT and commit) read the topic beside the classic group while
the seeds' faults run, and check_share holds them to the share invariants: no record
delivered again after its accept was confirmed, no delivery count over the limit, every
acknowledged send accepted (or archived by the limit) by the end. The checker's own cases
come first, on histories written by hand, so each invariant is shown to fail."""

from __future__ import annotations

import pytest

from harness.chaos.share_workload import check_share
from sim.run import Options, run_seed
from tests.sim.test_seeds import explain

SEEDS = [3, 7, 23]  # 23: a power loss of several nodes


def _op(index: int, f: str, value: dict, process: str = "share-0") -> dict:
    return {"index": index, "time": 0.0, "process": process, "type": "ok", "f": f,
            "value": value}


def _sent(index: int, partition: int, offset: int) -> dict:
    return _op(index, "send", {"partition": partition, "value": "v", "offset": offset},
               "producer-0")


def test_the_share_checker_finds_each_broken_promise():
    ok = [_sent(0, 0, 0), _sent(1, 0, 1),
          _op(2, "share_poll", {"records": [[0, 0, "v", 1], [0, 1, "v", 1]]}),
          _op(3, "share_accept", {"records": [[0, 0], [0, 1]]})]
    assert check_share(ok, set(), 5) == {}
    again = ok + [_op(4, "share_poll", {"records": [[0, 1, "v", 2]]}, "share-1")]
    assert list(check_share(again, set(), 5)) == ["share-accepted-twice"]
    over = [_sent(0, 0, 0), _op(1, "share_poll", {"records": [[0, 0, "v", 6]]}),
            _op(2, "share_accept", {"records": [[0, 0]]})]
    assert list(check_share(over, set(), 5)) == ["share-over-limit"]
    missing = ok[:3] + [_op(3, "share_accept", {"records": [[0, 0]]})]
    assert check_share(missing, set(), 5) == {"share-not-accepted": ["0@1"]}
    assert check_share(missing, {(0, 1)}, 5) == {}  # archived by the delivery limit
    # an accept whose answer was lost, written all the same: the start offset moved past it
    done = missing + [_op(4, "share_offsets", {"offsets": {"0": 2}}, "checker")]
    assert check_share(done, set(), 5) == {}


@pytest.mark.parametrize("seed", SEEDS)
def test_share_members_keep_every_promise_under_the_seeds_faults(seed):
    o = run_seed(seed, Options(nodes=3, duration_s=15.0, share_members=2))
    assert o.ok, explain(o)
    polls = [op for op in o.history if op["f"] == "share_poll"]
    assert polls and o.acked > 0, "the share members did nothing"
    assert {p for op in polls for p, *_ in op["value"]["records"]} == {0, 1, 2}
