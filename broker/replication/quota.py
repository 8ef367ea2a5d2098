"""Replication throttles (KIP-73, Kafka's ReplicationQuotaManager): a partition move must not
starve producers and consumers of the disk and network.

Owns `ThrottledRate`, `ReplicationQuota` and `ReplicationQuotas`. Two quotas per broker:
- the leader quota bounds the bytes this broker sends to followers of throttled
  partitions (`leader.replication.throttled.rate`, bytes/s);
- the follower quota bounds the bytes this broker fetches for throttled partitions
  (`follower.replication.throttled.rate`).
Each rate is a dynamic broker config: this broker's own value, else the cluster default
(the broker resource named ""), else the static one; unset means unthrottled. Which
partitions are throttled is a topic config, `leader.replication.throttled.replicas` and
`follower.replication.throttled.replicas`: "*" or `partition:broker,...`, of which a broker
keeps the entries naming itself, as Kafka's QuotaConfigHandler does. kafka-reassign-partitions
(and `minibroker reassign-partitions --throttle`) lists the replicas a move reads from as
leader-throttled and the replicas it adds as follower-throttled.

As in Kafka, a throttle holds back only replicas out of the ISR: a replica in sync is
never slowed, so acks=all produce latency does not depend on a move going on. The leader
answers a throttled follower's fetch without records while its quota is exceeded; the
follower leaves throttled partitions out of its fetches until its rate is back under the
bound. Both record the bytes of every throttled partition they move.

The rate is measured over `replication.quota.window.num` windows of
`replication.quota.window.size.seconds`, as Kafka's Rate: the bytes of the windows kept
over the time they span. Unlike Kafka's, the span of a young measurement counts from its
first sample (at least one window) instead of being rounded up to the whole span: Kafka's
rounding lets a fresh quota send ten seconds' worth of bytes at once, which makes a
one-minute move a fifth shorter than size / throttle. Pure: the caller passes the time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.config import (ALL_REPLICAS as ALL, FOLLOWER_REPLICAS, LEADER_REPLICAS,
                           ConfigError, parse_throttled_replicas)
from broker.controller.image import TOPIC_RESOURCE

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
UNLIMITED = 2**63 - 1  # Kafka's default rate: Long.MAX_VALUE, no throttle
BURSTS_PER_S = 10


def throttled_partitions(value: str | None, broker_id: int) -> frozenset[int] | str | None:
    """The partitions of a topic this broker throttles: ALL, a set, or None for none."""
    if not value:
        return None
    try:
        items = parse_throttled_replicas(value)
    except ConfigError:
        return None  # validated when set; a bad value throttles nothing
    if items == (ALL,):
        return ALL
    mine = frozenset(int(p) for p, b in (i.split(":") for i in items) if int(b) == broker_id)
    return mine or None


class ThrottledRate:
    """Bytes per second over the last `samples` windows of `window_s` seconds."""

    def __init__(self, samples: int = 11, window_s: float = 1.0):
        self.samples = max(samples, 1)
        self.window_s = window_s
        self._windows: deque[list[float]] = deque()  # [start, bytes]

    def record(self, size: int, now: float) -> None:
        if self._windows and now < self._windows[-1][0] + self.window_s:
            self._windows[-1][1] += size
        else:
            self._windows.append([now, float(size)])
        self._expire(now)

    def _expire(self, now: float) -> None:
        while self._windows and self._windows[0][0] <= now - self.samples * self.window_s:
            self._windows.popleft()

    def _measured(self, now: float) -> tuple[float, float]:
        """The bytes of the windows kept, and the time since the oldest began."""
        self._expire(now)
        if not self._windows:
            return 0.0, 0.0
        return sum(w[1] for w in self._windows), now - self._windows[0][0]

    def rate(self, now: float) -> float:
        total, span = self._measured(now)
        return total / max(span, self.window_s)

    def wait_s(self, bound: float, now: float) -> float:
        """How long until the rate is back at `bound` if nothing more is recorded."""
        total, span = self._measured(now)
        if bound <= 0:
            return 0.0
        return max(total / bound - span, 0.0)


@dataclass
class ReplicationQuota:
    """One of a broker's two replication quotas: its bound and the partitions it holds."""
    bound: int = UNLIMITED
    throttled: dict[str, frozenset[int] | str] = field(default_factory=dict)
    rate: ThrottledRate = field(default_factory=ThrottledRate)

    @property
    def active(self) -> bool:
        """Throttling anything at all: the hot paths ask nothing more when not."""
        return self.bound < UNLIMITED and bool(self.throttled)

    def is_throttled(self, topic: str, partition: int) -> bool:
        parts = self.throttled.get(topic)
        return parts is not None and (parts == ALL or partition in parts)

    def is_exceeded(self, now: float) -> bool:
        return self.bound < UNLIMITED and self.rate.rate(now) > self.bound

    def record(self, size: int, now: float) -> None:
        if size:
            self.rate.record(size, now)

    def wait_s(self, now: float) -> float:
        return self.rate.wait_s(self.bound, now)

    def burst_bytes(self) -> int:
        """The most one answer may carry of throttled replicas: a tenth of a second's worth
        (at least one batch goes), so that a move goes at its rate in steps, not in bursts
        of replica.fetch.response.max.bytes that stall the loop (a fiftieth measured worse:
        more round trips for the same bytes)."""
        return max(self.bound // BURSTS_PER_S, 1)


class ReplicationQuotas:
    """This broker's leader and follower quotas, following the metadata image's configs."""

    def __init__(self, broker_id: int, static: Mapping[str, Any]):
        self.broker_id = broker_id
        self._static = static  # the node's own config values, by property name
        samples = int(static.get("replication.quota.window.num") or 11)
        window_s = float(static.get("replication.quota.window.size.seconds") or 1)
        self.leader = ReplicationQuota(rate=ThrottledRate(samples, window_s))
        self.follower = ReplicationQuota(rate=ThrottledRate(samples, window_s))
        self._seen: object = None

    def follow(self, image: Any) -> None:
        """Take the image's throttles; cheap when its configs are the ones seen last (an
        image shares its configs with the one before unless a ConfigRecord changed them)."""
        configs = image.configs
        if configs is self._seen:
            return
        self._seen = configs
        mine, default = image.broker_configs(self.broker_id), image.broker_configs("")
        for quota, rate_key, replicas_key in ((self.leader, LEADER_RATE, LEADER_REPLICAS),
                                              (self.follower, FOLLOWER_RATE, FOLLOWER_REPLICAS)):
            quota.bound = _rate(mine.get(rate_key), default.get(rate_key),
                                self._static.get(rate_key))
            throttled: dict[str, frozenset[int] | str] = {}
            for (kind, name), entries in configs.items():
                if kind != TOPIC_RESOURCE or replicas_key not in entries:
                    continue
                parts = throttled_partitions(entries[replicas_key], self.broker_id)
                if parts is not None:
                    throttled[name] = parts
            quota.throttled = throttled


def _rate(*values: Any) -> int:
    for v in values:
        if v is not None and v != "":
            try:
                return max(int(v), 0)
            except ValueError:
                continue
    return UNLIMITED
