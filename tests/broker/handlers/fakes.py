"""A fake broker for handler tests: the interface the handlers use (`broker.metadata_cache`,
`broker.partition`, `broker.log_dirs`, `broker.controller_channel.forward`, `broker.wait_for_metadata`,
`broker.allocate_producer_id`, `broker.groups`), with the metadata image built from encoded
metadata records and a controller the test scripts.

Requests go through the real declarations: `request()` builds the body at a version and
parses it back, so a handler sees what the server would hand it (defaults, missing fields),
and `encode()` checks that an answer is encodable at that version.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

import trio

from broker.replication.quota import ReplicationQuotas
from broker.config import BrokerConfig
from broker.controller.image import TOPIC_RESOURCE, MetadataImage
from broker.controller_channel import ControllerUnavailable
from broker.coordinator.group_runtime import GroupRuntime
from broker.fetch_session import FetchSessionCache
from broker.handlers import HANDLERS
from broker.handlers.context import RequestContext
from broker.log_dirs import LogDirFailureChannel
from broker.metrics import BrokerMetrics
from broker.telemetry import ClientTelemetry
from broker.security.authorize import authorizer_for
from broker.metadata_cache import MetadataCache
from protocol.messages import APIS
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record

VERSIONS = {T.REGISTER_BROKER_RECORD: 3, T.PARTITION_RECORD: 2, T.PARTITION_CHANGE_RECORD: 2}
CLUSTER_ID = "fake-cluster-0000000000"


def record(record_type: T, **body) -> tuple[int, int, Any]:
    """One metadata record as the broker replays it: encoded, then decoded."""
    return decode_metadata_record(
        encode_metadata_record(record_type, VERSIONS.get(record_type, 0), body))


def register(broker_id: int, *, rack: str | None = None, fenced: bool = False) -> list:
    out = [record(T.REGISTER_BROKER_RECORD, broker_id=broker_id,
                  incarnation_id=uuid.UUID(int=100 + broker_id), broker_epoch=10 + broker_id,
                  end_points=[
                      {"name": "PLAINTEXT", "host": f"b{broker_id}.test", "port": 9092,
                       "security_protocol": 0},
                      {"name": "INTERNAL", "host": f"i{broker_id}.test", "port": 19092,
                       "security_protocol": 0}],
                  features=[], rack=rack, fenced=True)]
    if not fenced:
        out.append(record(T.UNFENCE_BROKER_RECORD, id=broker_id, epoch=10 + broker_id))
    return out


def topic(name: str, topic_id: uuid.UUID, replicas: list[list[int]], *,
          leaders: list[int] | None = None, epochs: list[int] | None = None,
          isr: list[list[int]] | None = None, configs: dict[str, str] | None = None,
          elr: list[list[int]] | None = None,
          last_known_elr: list[list[int]] | None = None) -> list:
    out = [record(T.TOPIC_RECORD, name=name, topic_id=topic_id)]
    for i, rs in enumerate(replicas):
        out.append(record(T.PARTITION_RECORD, partition_id=i, topic_id=topic_id, replicas=rs,
                          isr=isr[i] if isr else rs,
                          leader=leaders[i] if leaders else rs[0],
                          leader_epoch=epochs[i] if epochs else 0, partition_epoch=0,
                          eligible_leader_replicas=elr[i] if elr else None,
                          last_known_elr=last_known_elr[i] if last_known_elr else None))
    for key, value in (configs or {}).items():
        out.append(record(T.CONFIG_RECORD, resource_type=TOPIC_RESOURCE, resource_name=name,
                          name=key, value=value))
    return out


@dataclass
class FakePartition:
    """A local replica as the handlers see it before they touch its log."""

    topic: str
    index: int
    leader_id: int
    leader_epoch: int
    node_id: int

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id


@dataclass
class FakeController:
    """Answers forwarded requests with `respond(api_key, version, body) -> dict`, or raises
    ControllerUnavailable when `respond` is None; `commit` records are applied to the
    broker's image after answering, as a controller's commit reaches the broker later."""

    broker: FakeBroker
    respond: Callable[[int, int, Any], dict] | None = None
    commit: list = field(default_factory=list)
    requests: list = field(default_factory=list)

    async def forward(self, api_key: int, api_version: int, body: Any) -> dict:
        self.requests.append((api_key, api_version, body))
        if self.respond is None:
            raise ControllerUnavailable("no controller")
        response = self.respond(api_key, api_version, body)
        if self.commit:
            records, self.commit = self.commit, []
            assert self.broker.nursery is not None, "a test that commits gives a nursery"
            self.broker.nursery.start_soon(self.broker.apply_later, records)
        return response


class FakeBroker:
    def __init__(self, records: list, *, node_id: int = 0, controller_id: int = 1,
                 config: dict[str, str] | None = None, nursery: trio.Nursery | None = None):
        self.node_id = node_id
        self.listener_name = "PLAINTEXT"
        self.config = BrokerConfig.load({"broker.id": str(node_id), **(config or {})})
        self.authorizer = authorizer_for(self.config)
        self.metadata_cache = MetadataCache(CLUSTER_ID, MetadataImage.EMPTY.replay(records),
                                            controller_id=controller_id)
        self.partitions: dict[tuple[str, int], Any] = {}
        self.log_dirs = LogDirFailureChannel([("fake-data-dir", uuid.UUID(int=1000 + node_id))])
        # as Broker._log_dir_failed: the one directory's replicas stop being served
        self.offline_partitions: dict[tuple[str, int], Any] = {}
        self.log_dirs.listeners.append(lambda _dir, _reason: (
            self.offline_partitions.update(self.partitions), self.partitions.clear()))
        self.metrics = BrokerMetrics()
        self.telemetry = ClientTelemetry(self.config)
        self.controller_channel = FakeController(self)
        self.nursery = nursery
        self.metadata_changed = trio.Event()
        self.next_producer_id: int | None = 5000  # None: the controller is unavailable
        self.emitted: list[tuple[str, dict]] = []
        self.events = SimpleNamespace(emit=lambda type_, **fields: self.emitted.append(
            (type_, fields)))
        self.groups = GroupRuntime(self)
        self.now = 1_000_000
        self.fetch_sessions = FetchSessionCache()
        self.replication_quotas = ReplicationQuotas(node_id, self.config.values)

    def now_ms(self) -> int:
        return self.now

    def partition(self, topic: str, index: int):
        return self.partitions.get((topic, index))

    def reopen_partition(self, topic: str, index: int):
        """No disk here: a replica not held is not this broker's."""
        return None

    def serves(self, topics) -> bool:
        """No disk here: no log is ever being made."""
        return True

    def hold(self, topic: str, index: int, leader_id: int | None = None) -> FakePartition:
        """A local replica of a partition of the image, leading as the image says."""
        p = self.metadata_cache.partition(topic, index)
        assert p is not None
        fake = FakePartition(topic, index, p.leader if leader_id is None else leader_id,
                             p.leader_epoch, self.node_id)
        self.partitions[(topic, index)] = fake
        return fake

    def apply(self, records: list) -> None:
        self.metadata_cache.image = self.metadata_cache.image.replay(records)
        self.metadata_changed.set()
        self.metadata_changed = trio.Event()

    async def apply_later(self, records: list) -> None:
        await trio.sleep(0.5)  # the commit reaches this broker after the controller answered
        self.apply(records)

    async def wait_for_metadata(self, predicate: Callable[[MetadataCache], bool],
                                timeout_s: float) -> bool:
        with trio.move_on_after(timeout_s):
            while not predicate(self.metadata_cache):
                await self.metadata_changed.wait()
            return True
        return False

    async def allocate_producer_id(self) -> int:
        if self.next_producer_id is None:
            raise ControllerUnavailable("no controller")
        self.next_producer_id += 1
        return self.next_producer_id - 1

    def notify_data_arrived(self, topic: str, index: int) -> None:
        self.fetch_sessions.mark_changed(topic, index)

    async def wait_for_data(self, partitions) -> set:
        await trio.sleep_forever()
        return set()


def request(api_key: int, version: int, body: dict) -> SimpleNamespace:
    """A request as the server hands it to a handler: built at `version`, parsed back."""
    message = APIS[api_key].request
    parsed = message.parse(message.build(body, version), version)
    header = SimpleNamespace(api_key=api_key, api_version=version, correlation_id=1,
                             client_id="test")
    return SimpleNamespace(header=header, body=parsed, size=0, api_key=api_key,
                           api_version=version)


async def call(broker: FakeBroker, api_key: int, version: int, body: dict) -> Any:
    """Run the handler for one request; the answer must encode at the request's version."""
    ctx = RequestContext(broker, request(api_key, version, body), "127.0.0.1:40000")  # type: ignore[arg-type]
    response = await HANDLERS[api_key](ctx)
    if response is not None:
        encode(api_key, version, response)
    return response


def encode(api_key: int, version: int, response: dict) -> bytes:
    return APIS[api_key].response.build(response, version)
