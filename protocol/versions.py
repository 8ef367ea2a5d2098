"""Version negotiation: what we implement, what we advertise, which version to speak.

Owns the one place where versions are chosen. Messages carry no version.

The broker advertises MinVersion 0 for every API it serves, as Kafka 3.9 does, because old
librdkafka (kcat on Debian 12 uses 2.0.2) enables features such as compression only when the
advertised range *contains* particular old versions (docs/PROTOCOL.md §1). The MaxVersion is
exactly what is implemented, so every client sends min(its cap, our max). A request for a
version below what we implement is refused the way Kafka 4.0 refuses Produce v0-2: the
connection is closed.

A declaration may go further than the client-facing broker serves: `CLIENT_FACING_MAX`
caps such an API (none today: the broker's Fetch handler serves v13-17, topics by id). Our
client may speak less than the broker serves: `OUR_CLIENT_MAX` caps what `pick_version`
chooses (our consumer names topics, Fetch v12, with incremental fetch sessions). A
listener serving another registry (the controller's) checks a request against the
declaration itself with `accepts`.
"""

from __future__ import annotations

from typing import Mapping

from protocol.messages import APIS, END_TXN, FETCH, Api

# The highest version the client-facing broker serves (and our client speaks) where the
# declaration goes further: the one place such a cap is written.
CLIENT_FACING_MAX: dict[int, int] = {
    # v5 is KIP-890 part 2's (transaction.version 2: an epoch bump per transaction); the
    # transaction coordinator speaks transactions V1 (docs/TRANSACTIONS.md)
    END_TXN: 4,
}

# The highest version our client speaks where it is below what the broker serves.
OUR_CLIENT_MAX: dict[int, int] = {
    FETCH: 12,  # v13+ names topics by id; our consumer names them
}


def _declared(api: Api) -> tuple[int, int]:
    v = api.request.versions
    assert v.high is not None  # an API's declarations end at the newest version implemented
    return (v.low, v.high)


def _range(api: Api) -> tuple[int, int]:
    low, high = _declared(api)
    return (low, min(high, CLIENT_FACING_MAX.get(api.key, high)))


def implemented(api_key: int) -> tuple[int, int] | None:
    api = APIS.get(api_key)
    return None if api is None else _range(api)


def advertised(api_keys=None) -> list[tuple[int, int, int]]:
    """(api_key, min, max) for ApiVersions responses, ascending by key."""
    keys = sorted(APIS if api_keys is None else api_keys)
    return [(k, 0, _range(APIS[k])[1]) for k in keys]


def is_implemented(api_key: int, version: int) -> bool:
    rng = implemented(api_key)
    return rng is not None and rng[0] <= version <= rng[1]


def accepts(apis: Mapping[int, Api], api_key: int, version: int) -> bool:
    """Whether a listener serving `apis` takes this request: the client-facing registry
    within its caps, any other registry within its declarations."""
    if apis is APIS:
        return is_implemented(api_key, version)
    api = apis.get(api_key)
    if api is None:
        return False
    low, high = _declared(api)
    return low <= version <= high


def pick_version(api_key: int, broker_min: int, broker_max: int) -> int | None:
    """Highest version both sides support (the client's choice), or None if disjoint."""
    ours = implemented(api_key)
    if ours is None:
        return None
    low = max(ours[0], broker_min)
    high = min(ours[1], broker_max, OUR_CLIENT_MAX.get(api_key, ours[1]))
    return high if low <= high else None
