"""The cluster metadata a single broker keeps: cluster id, topics, topic ids, configs.

Owns: `MetadataImage` (topics by name with their id, partition count and config overrides,
and the producer-id block counter) and its persistence: `meta.properties` (cluster.id and
node.id, as Kafka writes it) and `cluster-metadata.json`, replaced atomically (write, fsync,
rename) on every change so a kill -9 leaves either the old or the new image, never half.
A change the disk refuses (OSError) is undone in memory too, then raised.
Topic-name rules are protocol/names.py's.

The controller of a multi-broker cluster will own this image later; the handlers only see
this interface.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.log.manager import base64_uuid, write_atomically

PRODUCER_ID_BLOCK = 1000


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    replication_factor: int = 1
    configs: dict[str, Any] = field(default_factory=dict)
    internal: bool = False

    def to_json(self) -> dict:
        return {"name": self.name, "topic_id": str(self.topic_id), "partitions": self.partitions,
                "replication_factor": self.replication_factor, "configs": self.configs,
                "internal": self.internal}

    @classmethod
    def from_json(cls, d: dict) -> "TopicInfo":
        return cls(d["name"], uuid.UUID(d["topic_id"]), d["partitions"],
                   d.get("replication_factor", 1), d.get("configs", {}), d.get("internal", False))


class MetadataImage:
    def __init__(self, data_dir: str | os.PathLike, broker_id: int):
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.broker_id = broker_id
        self.cluster_id = self._load_meta_properties()
        self.topics: dict[str, TopicInfo] = {}
        self._next_producer_id = 0
        self._producer_id_limit = 0  # ids below this are reserved on disk
        self._path = self.dir / "cluster-metadata.json"
        if self._path.exists():
            state = json.loads(self._path.read_text())
            self.topics = {t["name"]: TopicInfo.from_json(t) for t in state["topics"]}
            # never hand out an id that a previous run may have handed out
            self._next_producer_id = self._producer_id_limit = state["producer_id_limit"]

    def _load_meta_properties(self) -> str:
        path = self.dir / "meta.properties"
        if path.exists():
            props = dict(line.split("=", 1) for line in path.read_text().splitlines()
                         if "=" in line and not line.startswith("#"))
            return props["cluster.id"]
        cluster_id = base64_uuid(uuid.uuid4())
        write_atomically(path, f"version=1\ncluster.id={cluster_id}\nnode.id={self.broker_id}\n")
        return cluster_id

    def _save(self) -> None:
        state = {"topics": [t.to_json() for t in self.topics.values()],
                 "producer_id_limit": self._producer_id_limit}
        write_atomically(self._path, json.dumps(state, indent=1))

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for t in self.topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def create_topic(self, name: str, partitions: int, replication_factor: int = 1,
                     configs: dict[str, Any] | None = None, internal: bool = False) -> TopicInfo:
        info = TopicInfo(name, uuid.uuid4(), partitions, replication_factor, dict(configs or {}),
                         internal)
        self.topics[name] = info
        try:
            self._save()
        except OSError:
            del self.topics[name]  # memory never claims what the disk does not hold
            raise
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.topics.pop(name)
        try:
            self._save()
        except OSError:
            self.topics[name] = info
            raise
        return info

    def set_partitions(self, name: str, count: int) -> None:
        old = self.topics[name].partitions
        self.topics[name].partitions = count
        try:
            self._save()
        except OSError:
            self.topics[name].partitions = old
            raise

    def next_producer_id(self) -> int:
        """A producer id never handed out before, across restarts (reserved in blocks)."""
        if self._next_producer_id >= self._producer_id_limit:
            old = self._producer_id_limit
            self._producer_id_limit = self._next_producer_id + PRODUCER_ID_BLOCK
            try:
                self._save()
            except OSError:
                self._producer_id_limit = old
                raise
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid

