"""DescribeClientQuotas' filter, as Kafka's ClientQuotasImage.describe reads it: exact,
default and any-name components, `strict`, and the malformed filters it refuses."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from broker.handlers.quotas import describe
from protocol.errors import ErrorCode as E

QUOTAS = {
    (("user", "alice"),): {"producer_byte_rate": 1.0},
    (("client-id", "c1"), ("user", "alice")): {"consumer_byte_rate": 2.0},
    (("client-id", None), ("user", None)): {"request_percentage": 3.0},
    (("client-id", "c1"),): {"producer_byte_rate": 4.0},
    (("ip", None),): {"connection_creation_rate": 5.0},
}


def found(*components: tuple[str, int, str | None], strict: bool = False) -> set:
    answer = describe(QUOTAS, [NS(entity_type=t, match_type=m, match=n)
                               for t, m, n in components], strict)
    assert answer["error_code"] == E.NONE
    return {tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"])
            for entry in answer["entries"]}


def test_exact_default_and_any_name_with_and_without_strict():
    assert found() == set(QUOTAS)
    assert found(strict=True) == set()
    assert found(("user", 0, "alice")) == {(("user", "alice"),),
                                          (("client-id", "c1"), ("user", "alice"))}
    assert found(("user", 0, "alice"), strict=True) == {(("user", "alice"),)}
    assert found(("user", 1, None)) == {(("client-id", None), ("user", None))}
    assert found(("client-id", 2, None), strict=True) == {(("client-id", "c1"),)}
    assert found(("client-id", 2, None), ("user", 2, None)) == {
        (("client-id", "c1"), ("user", "alice")), (("client-id", None), ("user", None))}
    assert found(("ip", 1, None), strict=True) == {(("ip", None),)}


@pytest.mark.parametrize("components,code,words", [
    ([("", 0, "x")], E.INVALID_REQUEST, "Invalid empty entity type."),
    ([("user", 0, "a"), ("user", 2, None)], E.INVALID_REQUEST, "more than once"),
    ([("group", 0, "g")], E.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("user", 0, None)], E.INVALID_REQUEST, "MATCH_TYPE_EXACT, but set match string to null"),
    ([("user", 1, "a")], E.INVALID_REQUEST, "MATCH_TYPE_DEFAULT, but also specified"),
    ([("user", 2, "a")], E.INVALID_REQUEST, "MATCH_TYPE_SPECIFIED, but also specified"),
    ([("user", 7, None)], E.UNSUPPORTED_VERSION, "Unknown match type 7"),
    ([("ip", 2, None), ("user", 2, None)], E.INVALID_REQUEST, "IP filter component"),
])
def test_a_malformed_filter_is_refused_with_no_entries(components, code, words):
    answer = describe(QUOTAS, [NS(entity_type=t, match_type=m, match=n)
                               for t, m, n in components], False)
    assert answer["error_code"] == code and words in answer["error_message"]
    assert answer["entries"] is None
