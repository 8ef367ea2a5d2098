"""The transaction error codes Kafka's clients know: their numbers, retriable flags and the
client's exception classes for them."""

from __future__ import annotations

from client import errors
from protocol.errors import ErrorCode


def test_the_transaction_codes_have_kafkas_numbers_and_are_not_retriable():
    assert ErrorCode.of(52) is ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert ErrorCode.of(120) is ErrorCode.TRANSACTION_ABORTABLE
    # neither is a RetriableException in Kafka's clients: a fenced coordinator gives up its
    # markers, and an abortable transaction is aborted by the application, not retried
    for code in (ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.TRANSACTION_ABORTABLE):
        assert not code.retriable and not code.refresh_metadata


def test_the_client_raises_a_typed_exception_for_each():
    fenced = errors.for_code(52, "zombie coordinator")
    assert type(fenced) is errors.TransactionCoordinatorFencedError  # type: ignore[attr-defined]
    abortable = errors.for_code(120)
    assert type(abortable) is errors.TransactionAbortableError  # type: ignore[attr-defined]
    assert not abortable.retriable and str(abortable) == "TRANSACTION_ABORTABLE"
