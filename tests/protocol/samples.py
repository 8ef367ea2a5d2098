"""Messages filled with distinct, non-default values, for round-trip tests of
declarations: `_sample(fields, version, counter)` sets every field present in `version`
(structs and arrays included, two elements each)."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from protocol.schema import F, Struct


def _sample(fields: list[F], version: int, counter: itertools.count) -> dict:
    """A struct with every field present in `version` set to a distinct, non-default value."""
    out: dict = {}
    for f in fields:
        if version not in f.versions:
            continue
        n = next(counter)
        t = f.type
        if isinstance(t, list):
            out[f.name] = [_sample(t, version, counter) for _ in range(2)]
        elif isinstance(t, Struct):
            out[f.name] = _sample(t.fields, version, counter)
        elif t.startswith("[]"):
            out[f.name] = [_scalar(t[2:], n), _scalar(t[2:], n + 1)]
        else:
            out[f.name] = _scalar(t, n)
    return out


def _scalar(t: str, n: int) -> Any:
    if t == "bool":
        return True  # False is the default of every bool here but is_fenced
    if t == "string":
        return f"s{n}"
    if t in ("bytes", "records"):
        return bytes([n % 256]) * 3
    if t == "uuid":
        return uuid.UUID(int=n + 1)
    if t == "uint16":
        return 40000 + n
    if t == "int8":
        return n % 100 + 2
    return n + 100_000 if t in ("int32", "int64") else n + 2
