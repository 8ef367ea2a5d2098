"""Long runs of work cut into pieces, so that the event loop can serve other work between
them.

Owns `chunks`: consecutive slices of a sequence, in order, none longer than a size. A run
of thousands of metadata records (a CreateTopics of 3,000 partitions) is encoded, decoded
and replayed a slice per turn of the trio loop (broker.controller.runtime), rather than in
one step that holds up every request being served meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """`items` in consecutive slices of at most `size`, in order; none for no items."""
    if size < 1:
        raise ValueError(f"a chunk holds at least one item, not {size}")
    for start in range(0, len(items), size):
        yield items[start:start + size]
