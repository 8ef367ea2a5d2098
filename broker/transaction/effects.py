"""What the pure transaction coordinator asks of its runtime.

Owns: `Append` (one __transaction_state record) and `WriteTxnMarkers` (the markers ending
one transaction), and the union `TxnEffect`, which adds broker.coordinator.effects' `Reply`
and `Emit`. As for the group coordinator, the runtime carries effects out in order: an
`Append` is written (and replayed) before the `Reply` or `WriteTxnMarkers` after it, and
once it fails, what follows it is not done (a Reply carries the error instead, markers are
not sent) and `TransactionCoordinator.append_failed` is told.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.coordinator.effects import Emit, Reply
from broker.transaction.records import TransactionLogValue
from broker.transaction.state import TopicPartition, TransactionResult


@dataclass(frozen=True)
class Append:
    """One record for the transactional id's __transaction_state partition; value None is
    the tombstone of an expired id."""
    transactional_id: str
    value: TransactionLogValue | None


@dataclass(frozen=True)
class WriteTxnMarkers:
    """Write `result`'s marker to every partition of the transaction (one WriteTxnMarkers
    request per partition leader is the runtime's to build), then call
    `TransactionCoordinator.markers_written` with these fields. `coordinator_epoch` is the
    leader epoch of the __transaction_state partition, which partition leaders use to refuse
    markers from a coordinator that has since moved."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    result: TransactionResult
    partitions: frozenset[TopicPartition]
    coordinator_epoch: int


# The transaction runtime is to handle every member of this union and refuse anything else.
TxnEffect = Reply | Emit | Append | WriteTxnMarkers
