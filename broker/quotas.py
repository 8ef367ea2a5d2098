"""Client quota enforcement (KIP-13, KIP-55, KIP-124, KIP-219, KIP-599): which quota applies
to a request, how fast its client has been going, and how long it must be throttled.

Owns `Rate` (Kafka's `Rate` over a `SampledStat`: `quota.window.num` samples of
`quota.window.size.seconds`), `ClientQuotaManager` (Kafka's `ClientQuotaManager` for one
quota key: producer_byte_rate, consumer_byte_rate, request_percentage),
`ControllerMutationQuotaManager` with its `TokenBucket` (KIP-599's, for
controller_mutation_rate), `resolve` (the quota that applies to a user and client id) and
`BrokerQuotas` (the four managers of one broker). Pure: the time is an argument, the quotas
are the metadata image's `client_quotas`.

Which quota applies. As Kafka's DefaultQuotaCallback, the first of these entities that sets
the key wins:

    /config/users/<user>/clients/<client-id>
    /config/users/<user>/clients/<default>
    /config/users/<user>
    /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>
    /config/users/<default>
    /config/clients/<client-id>
    /config/clients/<default>

and the rate it bounds is shared by everyone the entity names: a quota on a user is one
budget for all of that user's client ids, a default quota one budget for each user (or
client id) it covers. So the rate is kept per (user, client id) with the parts the entity
does not name blanked, Kafka's metric tags.

Throttling. A request's value is recorded first, then the rate is measured over the
samples kept; above the quota, the throttle time is Kafka's QuotaUtils.throttleTime,
(rate - quota) / quota * window, the window being the time the samples span (at least
`window.num - 1` whole samples, so a new client's first burst is measured over that much).
The time is capped at the whole window (a quota of 0 would be infinite).
controller_mutation_rate is Kafka's TokenBucket instead (KIP-599): a burst of
`controller.quota.window.num` windows' worth of credit refilling at the quota, the throttle
time being how long the missing credit takes to come back. The server answers
with it in `throttle_time_ms` and reads nothing more from that connection until it has
passed (broker/server.py). With no quota in the image nothing is recorded at all.

The user is the principal's name ("ANONYMOUS" when the connection authenticated as nobody,
as Kafka names it); the client id is the request header's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from broker.controller.image import QuotaEntity
from broker.controller.quota_control import (
    CLIENT_ID, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE, USER,
)
from protocol import messages as m

Quotas = Mapping[QuotaEntity, Mapping[str, float]]
SensorKey = tuple[str, str]  # (user, client id), a part the quota's entity omits blank


def _precedence(user: str, client_id: str) -> list[tuple[QuotaEntity, SensorKey]]:
    """Kafka's order of quota entities for one user and client id, each with the key of the
    rate it bounds."""
    return [
        (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
        (((CLIENT_ID, None), (USER, user)), (user, client_id)),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
        (((CLIENT_ID, None), (USER, None)), (user, client_id)),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    ]


def resolve(quotas: Quotas, key: str, user: str,
            client_id: str) -> tuple[float, SensorKey] | None:
    """The quota `key` of this user and client id and the rate it bounds, or None."""
    for entity, sensor in _precedence(user, client_id):
        values = quotas.get(entity)
        if values is not None and key in values:
            return values[key], sensor
    return None


class Rate:
    """Kafka's Rate of a SampledTotal: the total of the samples still in the window over
    the time they span, per second."""

    __slots__ = ("samples", "num", "window_ms")

    def __init__(self, num: int, window_ms: int) -> None:
        self.samples: deque[list[float]] = deque()  # [start ms, total], oldest first
        self.num = num
        self.window_ms = window_ms

    def _purge(self, now_ms: int) -> None:
        expiry = now_ms - self.num * self.window_ms
        while self.samples and self.samples[0][0] <= expiry:
            self.samples.popleft()

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if not self.samples or now_ms - self.samples[-1][0] >= self.window_ms:
            self.samples.append([now_ms, 0.0])
            if len(self.samples) > self.num:
                self.samples.popleft()
        self.samples[-1][1] += value

    def unrecord(self, value: float) -> None:
        if self.samples:
            self.samples[-1][1] -= value

    def window_size_ms(self, now_ms: int) -> int:
        """Kafka's Rate.windowSize: the span of the samples, padded to `num - 1` whole
        windows, at least 1 ms."""
        self._purge(now_ms)
        elapsed = now_ms - int(self.samples[0][0]) if self.samples else 0
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Per second."""
        window = self.window_size_ms(now_ms)
        return sum(s[1] for s in self.samples) * 1000.0 / window

    def idle(self, now_ms: int) -> bool:
        return not self.samples or now_ms - self.samples[-1][0] > self.num * self.window_ms


class ClientQuotaManager:
    """The rates of one quota key, per (user, client id) as `resolve` keys them."""

    PURGE_EVERY = 1024  # records between sweeps of rates gone idle

    def __init__(self, key: str, window_num: int, window_size_ms: int) -> None:
        self.key = key
        self.window_num = window_num
        self.window_size_ms = window_size_ms
        self.max_throttle_ms = window_num * window_size_ms
        self.rates: dict[SensorKey, Rate] = {}
        self._records = 0

    def quota(self, quotas: Quotas, user: str, client_id: str) -> tuple[float, Rate] | None:
        if not quotas:
            return None
        found = resolve(quotas, self.key, user, client_id)
        if found is None:
            return None
        limit, sensor = found
        rate = self.rates.get(sensor)
        if rate is None:
            rate = self.rates[sensor] = Rate(self.window_num, self.window_size_ms)
        return limit, rate

    def record(self, quotas: Quotas, user: str, client_id: str, value: float,
               now_ms: int) -> int:
        """Record `value` and return the throttle time in ms (0 within the quota)."""
        found = self.quota(quotas, user, client_id)
        if found is None:
            return 0
        limit, rate = found
        self._records += 1
        if self._records % self.PURGE_EVERY == 0:
            self._purge(now_ms)
        rate.record(value, now_ms)
        return self._throttle(limit, rate, now_ms)

    def check(self, quotas: Quotas, user: str, client_id: str, now_ms: int) -> int:
        """The throttle time the rate already calls for, recording nothing (a strict
        controller mutation quota's check before it records, KIP-599)."""
        found = self.quota(quotas, user, client_id)
        return 0 if found is None else self._throttle(found[0], found[1], now_ms)

    def _throttle(self, limit: float, rate: Rate, now_ms: int) -> int:
        measured = rate.measure(now_ms)
        if measured <= limit:
            return 0
        if limit <= 0:
            return self.max_throttle_ms
        throttle = (measured - limit) / limit * rate.window_size_ms(now_ms)
        return min(round(throttle), self.max_throttle_ms)

    def unrecord(self, quotas: Quotas, user: str, client_id: str, value: float) -> None:
        """Take back a value recorded for a response that is not sent after all (a
        throttled fetch answers without its records, as Kafka's does)."""
        found = resolve(quotas, self.key, user, client_id)
        if found is not None and (rate := self.rates.get(found[1])) is not None:
            rate.unrecord(value)

    def max_value_in_window(self, quotas: Quotas, user: str, client_id: str) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: the most one response may carry, so that a
        single fetch never overshoots the quota by more than the window allows."""
        found = resolve(quotas, self.key, user, client_id) if quotas else None
        if found is None:
            return None
        return found[0] * (self.window_num - 1) * self.window_size_ms / 1000

    def _purge(self, now_ms: int) -> None:
        for sensor in [s for s, r in self.rates.items() if r.idle(now_ms)]:
            del self.rates[sensor]


class TokenBucket:
    """Kafka's TokenBucket (KIP-599), which bounds controller mutations: credit refills
    at the quota up to a burst of `window.num` windows' worth, each mutation takes its
    count, and below zero the client is over."""

    __slots__ = ("tokens", "last_ms")

    def __init__(self) -> None:
        self.tokens: float | None = None  # full at the first use
        self.last_ms = 0

    def refill(self, quota: float, burst_s: float, now_ms: int) -> float:
        burst = quota * burst_s
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * (now_ms - self.last_ms) / 1000)
        self.last_ms = now_ms
        return self.tokens


class ControllerMutationQuotaManager(ClientQuotaManager):
    """controller_mutation_rate on Kafka's TokenBucket rather than a sampled rate: the
    throttle time is how long the missing credit takes to refill."""

    def __init__(self, key: str, window_num: int, window_size_ms: int) -> None:
        super().__init__(key, window_num, window_size_ms)
        self.buckets: dict[SensorKey, TokenBucket] = {}

    def _bucket(self, quotas: Quotas, user: str,
                client_id: str) -> tuple[float, TokenBucket] | None:
        found = resolve(quotas, self.key, user, client_id) if quotas else None
        if found is None:
            return None
        limit, sensor = found
        bucket = self.buckets.get(sensor)
        if bucket is None:
            bucket = self.buckets[sensor] = TokenBucket()
        return limit, bucket

    def record(self, quotas: Quotas, user: str, client_id: str, value: float,
               now_ms: int) -> int:
        found = self._bucket(quotas, user, client_id)
        if found is None:
            return 0
        limit, bucket = found
        self._records += 1
        if self._records % self.PURGE_EVERY == 0:
            # a bucket not overdrawn and untouched for a whole burst's time is full
            # again: as good as a new one
            idle = now_ms - self.max_throttle_ms
            for sensor in [k for k, b in self.buckets.items()
                           if b.last_ms < idle and (b.tokens or 0) >= 0]:
                del self.buckets[sensor]
        burst_s = self.window_num * self.window_size_ms / 1000
        bucket.tokens = bucket.refill(limit, burst_s, now_ms) - value
        return self._bucket_throttle(limit, bucket.tokens)

    def check(self, quotas: Quotas, user: str, client_id: str, now_ms: int) -> int:
        found = self._bucket(quotas, user, client_id)
        if found is None:
            return 0
        limit, bucket = found
        tokens = bucket.refill(limit, self.window_num * self.window_size_ms / 1000, now_ms)
        return self._bucket_throttle(limit, tokens)

    def _bucket_throttle(self, limit: float, tokens: float) -> int:
        if tokens >= 0:
            return 0
        if limit <= 0:
            return self.max_throttle_ms
        return round(-tokens / limit * 1000)


class BrokerQuotas:
    """A broker's client quota managers, one per quota key."""

    def __init__(self, window_num: int = 11, window_size_ms: int = 1000,
                 controller_window_num: int = 11,
                 controller_window_size_ms: int = 1000) -> None:
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, window_num, window_size_ms)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, window_num, window_size_ms)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, window_num, window_size_ms)
        # Kafka's ClientRequestQuotaManager throttles for one window at most
        self.request.max_throttle_ms = window_size_ms
        self.controller_mutation = ControllerMutationQuotaManager(
            CONTROLLER_MUTATION_RATE, controller_window_num, controller_window_size_ms)



# KIP-219: from these versions on a client waits out the throttle time a response names
# itself, so the broker answers at once and mutes the connection; to an older version the
# broker holds the answer back for the throttle time instead. An API missing here is newer
# than KIP-219: every version of it throttles itself.
CLIENT_THROTTLES_FROM: dict[int, int] = {
    m.PRODUCE: 6, m.FETCH: 8, m.LIST_OFFSETS: 3, m.METADATA: 6, m.OFFSET_COMMIT: 4,
    m.OFFSET_FETCH: 4, m.FIND_COORDINATOR: 2, m.JOIN_GROUP: 3, m.HEARTBEAT: 2,
    m.LEAVE_GROUP: 2, m.SYNC_GROUP: 2, m.DESCRIBE_GROUPS: 2, m.LIST_GROUPS: 2,
    m.API_VERSIONS: 2, m.CREATE_TOPICS: 3, m.DELETE_TOPICS: 2, m.DELETE_RECORDS: 1,
    m.INIT_PRODUCER_ID: 1, m.OFFSET_FOR_LEADER_EPOCH: 1, m.ADD_PARTITIONS_TO_TXN: 1,
    m.ADD_OFFSETS_TO_TXN: 1, m.END_TXN: 1, m.TXN_OFFSET_COMMIT: 1, m.DESCRIBE_ACLS: 1,
    m.CREATE_ACLS: 1, m.DELETE_ACLS: 1, m.DESCRIBE_CONFIGS: 2, m.ALTER_CONFIGS: 1,
    m.CREATE_PARTITIONS: 1, m.DESCRIBE_LOG_DIRS: 1,
}

# not counted against request_percentage: the SASL login, the brokers' own calls
REQUEST_QUOTA_EXEMPT = frozenset({m.SASL_HANDSHAKE, m.SASL_AUTHENTICATE, m.WRITE_TXN_MARKERS})


def client_throttles(api_key: int, version: int) -> bool:
    return version >= CLIENT_THROTTLES_FROM.get(api_key, 0)
