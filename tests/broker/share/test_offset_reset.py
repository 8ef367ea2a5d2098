"""share.auto.offset.reset: the three policies and what is refused."""

import pytest

from broker.share.offset_reset import AutoOffsetReset, parse_auto_offset_reset


@pytest.mark.parametrize("value,expected", [
    ("latest", AutoOffsetReset("latest")), ("EARLIEST", AutoOffsetReset("earliest")),
    ("by_duration:PT1H", AutoOffsetReset("by_duration", 3_600_000)),
    ("by_duration:P1DT30M", AutoOffsetReset("by_duration", 88_200_000)),
    ("by_duration:PT1.5S", AutoOffsetReset("by_duration", 1_500)),
])
def test_policies(value, expected):
    assert parse_auto_offset_reset(value) == expected


@pytest.mark.parametrize("value", ["", "none", "by_duration:", "by_duration:P", "by_duration:PT",
                                   "by_duration:-PT1H", "by_duration:1H", "by_duration:PT1H2"])
def test_refused(value):
    with pytest.raises(ValueError):
        parse_auto_offset_reset(value)
