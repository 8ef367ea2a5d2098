"""A data directory's identity, and the metadata a pre-cluster version left in it.

Owns: `load_cluster_id` and `load_directory_id` (meta.properties: cluster.id, node.id and
directory.id, as Kafka writes them) and `LegacyMetadata`, the topics, topic ids, configs and producer-id limit that the single-broker
versions kept in `cluster-metadata.json`. The active controller turns them into metadata
records once (QuorumController.activate), after which the file is renamed
`cluster-metadata.json.migrated` so it is never read again.

The cluster id of a new data directory: with controller.quorum.voters set, one derived from
the voters, so that three nodes started with the same voters and no format step agree on it
(and nodes started with different voters do not: INCONSISTENT_CLUSTER_ID); alone, a random
one, as before.

The directory id (KIP-858) names the data directory to the controller: the broker registers
it and reports it in heartbeats when the directory fails. It is made once, a random id
outside the 100 Kafka reserves, and added to meta.properties (a directory made by an older
version gets one at its next start).
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any

from broker.config import ConfigError
from broker.controller.image import is_reserved_dir
from broker.log.manager import base64_uuid
from broker.storage import REAL, FileSystem, read_file, write_atomically

META_PROPERTIES = "meta.properties"
LEGACY_FILE = "cluster-metadata.json"
MIGRATED_SUFFIX = ".migrated"
_VOTERS_NAMESPACE = uuid.UUID("6d696e69-6272-6f6b-6572-2d6b72616674")


def cluster_id_for_voters(voters_text: str) -> str:
    return base64_uuid(uuid.uuid5(_VOTERS_NAMESPACE, voters_text))


def load_cluster_id(data_dir: str | os.PathLike, node_id: int, derived: str | None, *,
                    fs: FileSystem = REAL) -> str:
    """The directory's cluster.id; a new directory gets `derived` or a random one."""
    path = Path(data_dir) / META_PROPERTIES
    props = _read_properties(path, fs)
    if "cluster.id" in props:
        return props["cluster.id"]
    cluster_id = derived or base64_uuid(uuid.uuid4())
    _write_properties(path, {**props, "cluster.id": cluster_id, "node.id": str(node_id)}, fs)
    return cluster_id


def load_directory_id(data_dir: str | os.PathLike, *, fs: FileSystem = REAL) -> uuid.UUID:
    """The directory's directory.id, made and saved the first time it is asked for."""
    path = Path(data_dir) / META_PROPERTIES
    props = _read_properties(path, fs)
    if "directory.id" in props:
        text = props["directory.id"]
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    directory_id = uuid.uuid4()
    while is_reserved_dir(directory_id):  # never, in practice
        directory_id = uuid.uuid4()
    _write_properties(path, {**props, "directory.id": base64_uuid(directory_id)}, fs)
    return directory_id


def load_log_dir_ids(data_dirs: Sequence[str], node_id: int, cluster_id: str, *,
                     fs: FileSystem = REAL) -> list[uuid.UUID]:
    """Each log directory's directory.id, in order (the first's cluster.id is `cluster_id`,
    read already). Every directory gets Kafka's meta.properties: cluster.id, node.id and
    its own directory.id. A directory of another cluster, or two directories with one id
    (one copied from the other), refuse the start, as Kafka's do."""
    ids = []
    for data_dir in data_dirs:
        found = load_cluster_id(data_dir, node_id, cluster_id, fs=fs)
        if found != cluster_id:
            raise ConfigError(f"log directory {data_dir} belongs to cluster {found}, "
                              f"{data_dirs[0]} to {cluster_id}")
        ids.append(load_directory_id(data_dir, fs=fs))
    if len(set(ids)) != len(ids):
        raise ConfigError(f"two of the log directories {', '.join(data_dirs)} have the same "
                          "directory.id in meta.properties (one copied from another?)")
    return ids


def _read_properties(path: Path, fs: FileSystem) -> dict[str, str]:
    if not fs.exists(str(path)):
        return {}
    return {key.strip(): value.strip() for key, value in
            (line.split("=", 1) for line in read_file(path, fs=fs).decode().splitlines()
             if "=" in line and not line.startswith("#"))}


def _write_properties(path: Path, props: Mapping[str, str], fs: FileSystem) -> None:
    fs.makedirs(str(path.parent))
    props = {"version": "1", **props}
    write_atomically(path, "".join(f"{key}={value}\n" for key, value in props.items()), fs=fs)


@dataclass(frozen=True)
class LegacyTopic:
    """A topic of an old single-node data directory (cluster-metadata.json)."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LegacyMetadata:
    """What a single-node data directory held before it joined a KRaft quorum."""

    topics: tuple[LegacyTopic, ...]
    producer_id_limit: int = 0
    path: Path | None = None  # the file it was read from, renamed once migrated
    fs: FileSystem = field(default=REAL, compare=False, repr=False)

    @classmethod
    def load(cls, data_dir: str | os.PathLike, *, fs: FileSystem = REAL) -> LegacyMetadata | None:
        path = Path(data_dir) / LEGACY_FILE
        if not fs.exists(str(path)):
            return None
        state = json.loads(read_file(path, fs=fs))
        topics = tuple(LegacyTopic(t["name"], uuid.UUID(t["topic_id"]), t["partitions"],
                                   {k: _as_text(v) for k, v in t.get("configs", {}).items()})
                       for t in state["topics"])
        return cls(topics, int(state.get("producer_id_limit", 0)), path, fs)

    def mark_migrated(self) -> None:
        if self.path is not None and self.fs.exists(str(self.path)):
            self.fs.rename(str(self.path), str(self.path.with_name(self.path.name + MIGRATED_SUFFIX)))


def _as_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
