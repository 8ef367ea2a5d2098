"""`chunks`: a long run of work cut into consecutive pieces of bounded size, in order."""

import pytest

from broker.chunking import chunks


@pytest.mark.parametrize("n, size", [(0, 3), (1, 3), (3, 3), (7, 3), (10, 1), (5, 100)])
def test_chunks_are_the_items_in_order_each_at_most_size_and_only_the_last_shorter(n, size):
    items = [f"record-{i}" for i in range(n)]
    pieces = [list(p) for p in chunks(items, size)]
    assert [x for p in pieces for x in p] == items
    assert all(1 <= len(p) <= size for p in pieces)
    assert all(len(p) == size for p in pieces[:-1])
    assert len(pieces) == -(-n // size)


def test_a_chunk_size_below_one_is_refused():
    with pytest.raises(ValueError):
        list(chunks([1, 2], 0))
