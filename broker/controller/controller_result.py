"""What every control manager hands back: an operation's records and its response.

Owns `ControllerResult` (Kafka's ControllerResult: the metadata records to append as ONE
Raft entry, and the response to send once that entry commits), `Batch`, which collects an
operation's records on a scratch image so that a later step of the same operation sees an
earlier one (fencing a broker, then electing leaders, sees the fence), and the small helpers
the managers share to read request fields and shape error answers. Pure: nothing here reads
a clock or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.controller import election
from broker.controller.election import NO_LEADER_CHANGE
from broker.controller.image import MetadataImage
from protocol.errors import ErrorCode
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record

Record = tuple[int, int, dict]

# the most records an operation's result leaves for the runtime to replay a turn of the event
# loop at a time: a CreateTopics of 3,000 partitions is 3,000 records (about 100 ms of CPU,
# several times that on a busy machine), a hundred a turn keep the requests served meanwhile
# from waiting behind it
REPLAY_SLICE = 100

# PartitionChangeRecord v2 carries KIP-966's EligibleLeaderReplicas and LastKnownElr
PARTITION_CHANGE_VERSION = 2


@dataclass(frozen=True)
class ControllerResult:
    """Records to append as one entry, and the response to send when it commits."""

    records: tuple[Record, ...]
    response: Any


class Batch:
    """The records of one operation and the scratch image they build.

    Records added are applied when `image` is next read (and at `result`, so a record the
    image refuses still fails the operation), all of them in one `MetadataImage.replay`:
    a run of partition, config or ACL records changes one working copy of its mapping.
    Applied one by one, fencing a broker that led 3,000 partitions copied the topic's whole
    partition map 3,000 times (a second and more of a restarted broker's registration).
    A result with more than REPLAY_SLICE records not yet applied (a CreateTopics of 3,000
    partitions, which never reads its image after adding them) is not applied at `result`:
    the runtime replays its entry REPLAY_SLICE records per turn of the event loop before
    appending it, and a record the image refuses fails the operation there, nothing
    appended."""

    def __init__(self, image: MetadataImage) -> None:
        self._image = image
        self._pending: list[Record] = []
        self.records: list[Record] = []

    @property
    def image(self) -> MetadataImage:
        if self._pending:
            pending, self._pending = self._pending, []
            # through the codec, so the scratch image is exactly what replay will build
            self._image = self._image.replay(
                decode_metadata_record(encode_metadata_record(t, v, body))
                for t, v, body in pending)
        return self._image

    def add(self, record_type: int, version: int, body: dict) -> None:
        record = (int(record_type), version, body)
        self.records.append(record)
        self._pending.append(record)

    def extend(self, records: list[Record]) -> None:
        """Many records at once (CreateAcls writes one per ACL)."""
        for t, v, body in records:
            self.add(t, v, body)

    def change(self, change: election.PartitionChangeRecord | None) -> None:
        if change is None:
            return
        body: dict[str, Any] = {"topic_id": change.topic_id,
                                "partition_id": change.partition_id}
        if change.isr is not None:
            body["isr"] = list(change.isr)
        if change.leader != NO_LEADER_CHANGE:
            body["leader"] = change.leader
        if change.replicas is not None:
            body["replicas"] = list(change.replicas)
        if change.adding_replicas is not None:
            body["adding_replicas"] = list(change.adding_replicas)
        if change.removing_replicas is not None:
            body["removing_replicas"] = list(change.removing_replicas)
        if change.leader_recovery_state != -1:
            body["leader_recovery_state"] = change.leader_recovery_state
        if change.elr is not None:
            body["eligible_leader_replicas"] = list(change.elr)
        if change.last_known_elr is not None:
            body["last_known_elr"] = list(change.last_known_elr)
        if change.directories is not None:
            body["directories"] = list(change.directories)
        self.add(T.PARTITION_CHANGE_RECORD, PARTITION_CHANGE_VERSION, body)

    def result(self, response: Any) -> ControllerResult:
        if len(self._pending) <= REPLAY_SLICE:
            _ = self.image  # applies what is pending: a record the image refuses raises here
        return ControllerResult(tuple(self.records), response)


def error(code: ErrorCode, message: str | None = None) -> dict:
    """The error_code and error_message fields of an answer."""
    return {"error_code": int(code), "error_message": message}


def get(body: Any, name: str, default: Any = None) -> Any:
    """A request field that older versions lack."""
    try:
        value = body.get(name, default)
    except AttributeError:
        value = getattr(body, name, default)
    return default if value is None and default is not None else value
