"""`share.auto.offset.reset`, a share group's config (KIP-932, Kafka 4.1's ShareGroupConfig):
where a share group starts on a partition it never read.

Owns: `AutoOffsetReset` and `parse_auto_offset_reset`: "latest" (the default: only records
written from now on), "earliest" (the log start), or "by_duration:<ISO-8601 duration>"
(the first record written at or after that long ago, such as by_duration:PT1H). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d{1,3})?)S)?)?$")


@dataclass(frozen=True)
class AutoOffsetReset:
    kind: str  # "latest" | "earliest" | "by_duration"
    duration_ms: int = 0


def parse_auto_offset_reset(value: str) -> AutoOffsetReset:
    """The policy a config value names; ValueError for anything else."""
    text = value.strip().lower()
    if text in ("latest", "earliest"):
        return AutoOffsetReset(text)
    if not text.startswith("by_duration:"):
        raise ValueError(f"{value!r} is not latest, earliest or by_duration:<duration>")
    iso = value.strip()[len("by_duration:"):].upper()
    match = _DURATION.match(iso)
    if match is None or iso in ("P", "PT") or iso.endswith("T"):
        raise ValueError(f"{iso!r} is not an ISO-8601 duration such as PT1H or P1D")
    days, hours, minutes = (int(match.group(g) or 0) for g in "dhm")
    seconds = float(match.group("s") or 0)
    ms = round(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
    return AutoOffsetReset("by_duration", ms)
