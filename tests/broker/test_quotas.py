"""Client quota enforcement's pure parts (broker.quotas): which quota applies to a user
and client id in Kafka's order, whose rate it bounds, and the throttle time Kafka's
QuotaUtils computes from the sampled rate."""

from __future__ import annotations

from broker.quotas import BrokerQuotas, ClientQuotaManager, Rate, client_throttles, resolve
from protocol import messages as m

P = "producer_byte_rate"

EVERY_LEVEL = {
    (("client-id", "c"), ("user", "u")): {P: 1.0},
    (("client-id", None), ("user", "u")): {P: 2.0},
    (("user", "u"),): {P: 3.0},
    (("client-id", "c"), ("user", None)): {P: 4.0},
    (("client-id", None), ("user", None)): {P: 5.0},
    (("user", None),): {P: 6.0},
    (("client-id", "c"),): {P: 7.0},
    (("client-id", None),): {P: 8.0},
}


def test_the_most_specific_entity_wins_in_kafkas_order():
    quotas = dict(EVERY_LEVEL)
    expected = [(1.0, ("u", "c")), (2.0, ("u", "c")), (3.0, ("u", "")), (4.0, ("u", "c")),
                (5.0, ("u", "c")), (6.0, ("u", "")), (7.0, ("", "c")), (8.0, ("", "c"))]
    for value, sensor in expected:
        assert resolve(quotas, P, "u", "c") == (value, sensor)
        del quotas[next(e for e, q in quotas.items() if q[P] == value)]
    assert resolve(quotas, P, "u", "c") is None


def test_a_default_is_a_budget_per_entity_and_a_named_user_one_budget_for_its_clients():
    quotas = {(("client-id", None),): {P: 8.0}, (("user", "u"),): {P: 3.0}}
    assert resolve(quotas, P, "x", "c1")[1] != resolve(quotas, P, "x", "c2")[1]
    assert resolve(quotas, P, "u", "c1")[1] == resolve(quotas, P, "u", "c2")[1] == ("u", "")
    assert resolve(quotas, "consumer_byte_rate", "u", "c1") is None


def test_rate_over_a_padded_window_and_kafkas_throttle_time():
    rate = Rate(num=11, window_ms=1000)
    rate.record(5000, now_ms=0)
    # one sample: the window is padded to num - 1 = 10 whole windows
    assert rate.window_size_ms(0) == 10_000 and rate.measure(0) == 500.0
    manager = ClientQuotaManager(P, 11, 1000)
    quotas = {(("client-id", "c"),): {P: 100.0}}
    assert manager.record(quotas, "u", "c", 1000, now_ms=0) == 0  # 100 B/s: at the quota
    # 3000 B over 10 s is 300 B/s: (300 - 100) / 100 * 10 s = 20 s, capped at 11 windows
    assert manager.record(quotas, "u", "c", 2000, now_ms=0) == 11_000
    manager = ClientQuotaManager(P, 11, 1000)
    assert manager.record(quotas, "u", "c", 1500, now_ms=0) == 5_000  # (150-100)/100*10 s
    manager.unrecord(quotas, "u", "c", 1500)
    assert manager.check(quotas, "u", "c", now_ms=0) == 0


def test_samples_older_than_the_window_are_forgotten():
    manager = ClientQuotaManager(P, 3, 1000)
    quotas = {(("client-id", "c"),): {P: 10.0}}
    assert manager.record(quotas, "u", "c", 100, now_ms=0) > 0
    assert manager.check(quotas, "u", "c", now_ms=3_000) == 0
    assert manager.record(quotas, "u", "c", 10, now_ms=3_000) == 0


def test_no_quota_records_nothing():
    manager = ClientQuotaManager(P, 11, 1000)
    assert manager.record({}, "u", "c", 10**9, now_ms=0) == 0
    assert manager.record({(("user", "v"),): {P: 1.0}}, "u", "c", 10**9, now_ms=0) == 0
    assert manager.rates == {}
    assert manager.max_value_in_window({}, "u", "c") is None
    assert manager.max_value_in_window({(("user", "u"),): {P: 100.0}}, "u", "c") == 1000.0


def test_request_quota_throttles_one_window_at_most_and_kip_219_versions():
    quotas = BrokerQuotas(11, 1000)
    limits = {(("client-id", "c"),): {"request_percentage": 1.0}}
    assert quotas.request.record(limits, "u", "c", 500.0, now_ms=0) == 1000
    assert client_throttles(m.PRODUCE, 6) and not client_throttles(m.PRODUCE, 5)
    assert client_throttles(m.FETCH, 8) and not client_throttles(m.FETCH, 7)
    assert client_throttles(m.ALTER_CLIENT_QUOTAS, 0)


def test_controller_mutations_spend_a_token_bucket_as_kip_599_does():
    quotas = BrokerQuotas(controller_window_num=10, controller_window_size_ms=1000)
    manager = quotas.controller_mutation
    limits = {(("user", None),): {"controller_mutation_rate": 2.0}}
    # a burst of 10 windows at 2 a second: 20 partitions at once, the 21st overdraws
    assert manager.record(limits, "u", "c", 20, now_ms=1_000) == 0
    assert manager.check(limits, "u", "c", now_ms=1_000) == 0
    assert manager.record(limits, "u", "c", 4, now_ms=1_000) == 2_000  # 4 missing at 2/s
    assert manager.check(limits, "u", "c", now_ms=2_000) == 1_000
    assert manager.check(limits, "u", "c", now_ms=3_000) == 0
    # another user has a bucket of its own (a default is a budget per user)
    assert manager.record(limits, "v", "c", 20, now_ms=3_000) == 0
