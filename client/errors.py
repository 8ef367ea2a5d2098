"""Exceptions the client raises: Kafka's error codes as typed exceptions, plus the client's own.

Owns: `KafkaError` (every client exception: `.code` is a protocol.errors.ErrorCode,
`.retriable` and `.refresh_metadata` follow it), one subclass per ErrorCode named in
Kafka's vocabulary (TOPIC_ALREADY_EXISTS -> `TopicAlreadyExistsError`,
INVALID_TOPIC_EXCEPTION -> `InvalidTopicError`), `for_code(code, message)` to raise the
right one, and the client-side failures that have no code of their own on the wire:

- `KafkaConnectionError` (a NetworkError, retriable): the TCP connection could not be opened
  or was lost; every request in flight on it fails with this.
- `NoBrokersAvailable` (a KafkaConnectionError): no bootstrap address or known node answered.
- `KafkaTimeoutError` (a RequestTimedOutError, retriable): no response within
  request_timeout_ms, or an operation's deadline passed while it was retrying.
- `IncompatibleBrokerVersion` (an UnsupportedVersionError, not retriable): the broker does not
  serve an API, or no version of it is common to both sides.
- `CommitFailedError` (not retriable; Java's CommitFailedException): a group member's commit
  cannot complete because the member is out of the group's generation (max_poll_interval_ms
  exceeded, its session lost): its partitions may be another member's by now.

The transactional producer's three kinds of failure (client/producer/transaction_manager.py):

- `FatalTransactionError`: the producer cannot go on and must be closed. The classes of
  PRODUCER_FENCED (`ProducerFencedError`: another producer with the same transactional id
  started), TRANSACTIONAL_ID_AUTHORIZATION_FAILED and INVALID_PRODUCER_ID_MAPPING are its
  subclasses, as Java's ProducerFencedException and TransactionalIdAuthorizationException
  are fatal there.
- `TransactionAbortableError` (TRANSACTION_ABORTABLE's class): the transaction must be
  aborted, and then the producer goes on; raised by commit_transaction and send after a
  record of the transaction failed, with that failure as its `__cause__`.
- `IllegalStateError` (an InvalidTxnStateError; Java's IllegalStateException,
  kafka-python's name): a call the transaction's state does not allow, as
  begin_transaction twice, commit_transaction without one, send outside one.
  `TransactionAbortedError` (an OperationNotAttemptedError; Java's
  TransactionAbortedException) fails the records abort_transaction dropped unsent.

`.retriable` says which errors the client retries on its own (a lost connection, a leader
or coordinator that moved, a timeout) and which reach the application: the consumer's
getmany and iteration never raise a retriable error.

Errors are data on the wire (docs/ARCHITECTURE.md §7); they become exceptions only here, at the
edge where a caller asked for something and did not get it.

    try:
        await admin.create_topics({"orders": 3})
    except errors.TopicAlreadyExistsError as e:
        assert e.code == ErrorCode.TOPIC_ALREADY_EXISTS and not e.retriable
"""

from __future__ import annotations

from protocol.errors import ErrorCode

__all__ = [
    "ErrorCode", "KafkaError", "KafkaConnectionError", "NoBrokersAvailable",
    "KafkaTimeoutError", "IncompatibleBrokerVersion", "CommitFailedError", "for_code",
    "error_class", "FatalTransactionError", "IllegalStateError", "TransactionAbortedError",
    "FATAL_TRANSACTION_CODES",
]


class KafkaError(Exception):
    """A Kafka error: `.code` (ErrorCode), `.message` (the broker's text or ours)."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, code: int | ErrorCode | None = None, message: str | None = None):
        if code is not None:
            self.code = ErrorCode.of(int(code))
        self.message = message
        super().__init__(int(self.code), message)

    def __str__(self) -> str:
        return self.code.name if self.message is None else f"{self.code.name}: {self.message}"

    def clone(self) -> "KafkaError":
        """A fresh exception equal to this one, to raise in another task (each raise writes
        its own traceback into the object)."""
        new = Exception.__new__(type(self))
        Exception.__init__(new, *self.args)
        new.__dict__.update(self.__dict__)
        new.__cause__ = self.__cause__
        return new

    @property
    def retriable(self) -> bool:
        return self.code.retriable

    @property
    def refresh_metadata(self) -> bool:
        return self.code.refresh_metadata


class FatalTransactionError(KafkaError):
    """The transactional producer cannot go on (fenced by a newer producer with its
    transactional id, not authorized for it, its producer id unknown to the coordinator):
    every later call raises it again; close the producer. Never retriable."""

    @property
    def retriable(self) -> bool:
        return False


# the codes whose classes are FatalTransactionErrors (INVALID_PRODUCER_EPOCH is not: an
# idempotent producer recovers from it with a new epoch, and the transactional producer
# raises ProducerFencedError for it, as Java's TransactionManager does)
FATAL_TRANSACTION_CODES = frozenset({ErrorCode.PRODUCER_FENCED,
                                     ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                     ErrorCode.INVALID_PRODUCER_ID_MAPPING})


def _class_name(code: ErrorCode) -> str:
    words = code.name.removesuffix("_EXCEPTION").removesuffix("_ERROR").split("_")
    return "".join(w.capitalize() for w in words) + "Error"


_BY_CODE: dict[ErrorCode, type[KafkaError]] = {}

# One subclass per code, generated from the enum so that a code added there gets its class
# here; `errors.TopicAlreadyExistsError`, `errors.NotLeaderOrFollowerError`, ...
for _code in ErrorCode:
    if _code is ErrorCode.NONE:
        continue
    _name = _class_name(_code)
    _base = FatalTransactionError if _code in FATAL_TRANSACTION_CODES else KafkaError
    _cls = type(_name, (_base,), {"code": _code, "__module__": __name__,
                                       "__doc__": f"Kafka error {int(_code)} {_code.name}."})
    _BY_CODE[_code] = _cls
    globals()[_name] = _cls
    __all__.append(_name)
del _code, _name, _cls, _base


def error_class(code: int | ErrorCode) -> type[KafkaError]:
    """The exception class for a code; unknown codes map to UNKNOWN_SERVER_ERROR's."""
    return _BY_CODE.get(ErrorCode.of(int(code)), _BY_CODE[ErrorCode.UNKNOWN_SERVER_ERROR])


def for_code(code: int | ErrorCode, message: str | None = None) -> KafkaError:
    """The typed exception for a nonzero error code from a response."""
    code = ErrorCode.of(int(code))
    if code is ErrorCode.NONE:
        raise ValueError("error code 0 (NONE) is not an error")
    return error_class(code)(code, message)


class KafkaConnectionError(_BY_CODE[ErrorCode.NETWORK_EXCEPTION]):  # type: ignore[misc,valid-type]
    """The connection to a broker could not be opened or was lost (retriable)."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.NETWORK_EXCEPTION, message)


class NoBrokersAvailable(KafkaConnectionError):
    """Neither a bootstrap address nor any known node could be reached."""


class KafkaTimeoutError(_BY_CODE[ErrorCode.REQUEST_TIMED_OUT]):  # type: ignore[misc,valid-type]
    """No response within the request timeout, or an operation ran out of time (retriable)."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)


class IncompatibleBrokerVersion(_BY_CODE[ErrorCode.UNSUPPORTED_VERSION]):  # type: ignore[misc,valid-type]
    """The broker does not serve the API, or serves no version we speak (not retriable)."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.UNSUPPORTED_VERSION, message)


class CommitFailedError(KafkaError):
    """Java's CommitFailedException: the commit cannot complete because this member is no
    longer in the group's current generation (it exceeded max_poll_interval_ms, lost its
    session, or a rebalance completed without it), so the partitions it consumed may already
    belong to another member. Not retriable: the next getmany rejoins the group; commit what
    is consumed after that. `.code` is the broker's answer (UNKNOWN_MEMBER_ID,
    ILLEGAL_GENERATION) when it gave one."""

    code = ErrorCode.UNKNOWN_MEMBER_ID

    def __init__(self, message: str, code: int | ErrorCode | None = None):
        super().__init__(self.code if code is None else code, message)

    @property
    def retriable(self) -> bool:
        return False


class IllegalStateError(_BY_CODE[ErrorCode.INVALID_TXN_STATE]):  # type: ignore[misc,valid-type]
    """A call the transactional producer's state does not allow (Java's
    IllegalStateException): begin_transaction inside a transaction, commit or abort
    outside one, send outside one, a transactional call on a producer without a
    transactional_id. Nothing was sent. Not retriable."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.INVALID_TXN_STATE, message)

    @property
    def retriable(self) -> bool:
        return False


class TransactionAbortedError(_BY_CODE[ErrorCode.OPERATION_NOT_ATTEMPTED]):  # type: ignore[misc,valid-type]
    """A record of a transaction that was aborted before the record was sent (Java's
    TransactionAbortedException): it was never written."""

    def __init__(self, message: str = "the transaction was aborted before the record was sent"):
        super().__init__(ErrorCode.OPERATION_NOT_ATTEMPTED, message)
