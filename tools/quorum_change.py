"""`minibroker metadata-quorum add-controller` and `remove-controller` (KIP-853): change the
voters of a dynamic metadata quorum (one started with controller.quorum.bootstrap.servers)
with AddRaftVoter and RemoveRaftVoter, as kafka-metadata-quorum.sh does.

    minibroker metadata-quorum --bootstrap-server 127.0.0.1:9092 add-controller \\
        --command-config controller.properties
    minibroker metadata-quorum --bootstrap-server 127.0.0.1:9092 add-controller \\
        --controller-id 3 --controller-directory-id DIR_ID \\
        --controller-endpoint CONTROLLER://127.0.0.1:9193
    minibroker metadata-quorum --bootstrap-server 127.0.0.1:9092 remove-controller \\
        --controller-id 1 --controller-directory-id DIR_ID

add-controller adds a running controller (started with process.roles=controller and
controller.quorum.bootstrap.servers, fetching the metadata log as an observer): its id,
the directory id in its data directory's meta.properties and its controller endpoint come
from its properties file (`--command-config`: node.id, log.dirs, listeners,
controller.listener.names, as Kafka's tool reads them) or from the options. The leader adds
it only once it has caught up; until then the tool retries within `--timeout`. A voter the
quorum started with has the zero directory id, AAAAAAAAAAAAAAAAAAAAAA (`describe
--replication` shows each voter's). Prints one line on success; a refusal exits 1 with
Kafka's error (DUPLICATE_VOTER, VOTER_NOT_FOUND, ...).

Owns: `add_change_arguments`, `controller_from_properties`, `new_controller` (the
controller to add, from the file or the options), `run_change`.
"""

from __future__ import annotations

import argparse
import base64
import uuid
from pathlib import Path
from typing import TextIO

from client.admin import AdminClient

DEFAULT_LISTENER = "CONTROLLER"


def parse_directory_id(text: str) -> uuid.UUID:
    """Kafka's base64 (url-safe, unpadded) form of a Uuid, or the dashed hex form."""
    text = text.strip()
    try:
        if len(text) == 22:
            return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a directory id: {text!r}") from None


def format_directory_id(directory_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(directory_id.bytes).decode().rstrip("=")


def _read_properties(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def _endpoint(text: str, listener: str) -> tuple[str, str, int]:
    name, sep, address = text.partition("://")
    if not sep:
        name, address = listener, text
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected [NAME://]HOST:PORT, got {text!r}")
    return name.upper(), host.strip("[]"), int(port)


def controller_from_properties(path: Path) -> tuple[int, uuid.UUID, tuple[str, str, int]]:
    """(node id, directory id, controller endpoint) of the controller whose properties file
    is `path`: its meta.properties gives the directory id."""
    try:
        props = _read_properties(path)
        node_id = int(props.get("node.id") or props.get("broker.id") or "")
        log_dir = (props.get("log.dirs") or props.get("log.dir") or "").split(",")[0].strip()
        meta = _read_properties(Path(log_dir) / "meta.properties")
    except OSError as e:  # one line, as any bad option: not a traceback
        raise ValueError(f"--command-config: cannot read {e.filename}: {e.strerror}") from None
    if "directory.id" not in meta:
        raise ValueError(f"{log_dir}/meta.properties has no directory.id: start the "
                         "controller once before adding it")
    listener = (props.get("controller.listener.names") or DEFAULT_LISTENER).split(",")[0]
    listener = listener.strip().upper()
    endpoints = [_endpoint(e.strip(), "PLAINTEXT")
                 for e in (props.get("listeners") or "").split(",") if e.strip()]
    endpoint = next((e for e in endpoints if e[0] == listener), None)
    if endpoint is None:
        raise ValueError(f"{path}: listeners has no {listener} listener")
    return node_id, parse_directory_id(meta["directory.id"]), endpoint


def add_change_arguments(sub, common) -> None:
    add = sub.add_parser("add-controller", help="add a running controller to the voters "
                                                "(AddRaftVoter, KIP-853)")
    common(add)
    add.add_argument("--controller-id", type=int, default=None, metavar="ID")
    add.add_argument("--controller-directory-id", type=parse_directory_id, default=None,
                     metavar="DIR_ID", help="its metadata log directory's directory.id")
    add.add_argument("--controller-endpoint", default=None, metavar="[NAME://]HOST:PORT",
                     help="its controller listener")
    remove = sub.add_parser("remove-controller", help="remove a voter (RemoveRaftVoter)")
    common(remove)
    remove.add_argument("--controller-id", type=int, required=True, metavar="ID")
    remove.add_argument("--controller-directory-id", type=parse_directory_id, required=True,
                        metavar="DIR_ID")


def new_controller(args) -> tuple[int, uuid.UUID, tuple[str, str, int]]:
    node_id, directory_id, endpoint = None, None, None
    config = getattr(args, "controller_config", None)  # --command-config, as Kafka's tool
    if config:
        node_id, directory_id, endpoint = controller_from_properties(Path(config))
    node_id = args.controller_id if args.controller_id is not None else node_id
    directory_id = args.controller_directory_id or directory_id
    if args.controller_endpoint:
        endpoint = _endpoint(args.controller_endpoint, DEFAULT_LISTENER)
    if node_id is None or directory_id is None or endpoint is None:
        raise ValueError("add-controller needs --command-config, or --controller-id, "
                         "--controller-directory-id and --controller-endpoint")
    return node_id, directory_id, endpoint


async def run_change(admin: AdminClient, args, out: TextIO) -> None:
    if args.cluster_command == "add-controller":
        node_id, directory_id, endpoint = getattr(args, "new_controller", None) or \
            new_controller(args)
        await admin.add_raft_voter(node_id, directory_id, [endpoint], timeout_ms=args.timeout)
        out.write(f"Added controller {node_id} with directory id "
                  f"{format_directory_id(directory_id)} and endpoint "
                  f"{endpoint[0]}://{endpoint[1]}:{endpoint[2]}\n")
    else:
        await admin.remove_raft_voter(args.controller_id, args.controller_directory_id,
                                      timeout_ms=args.timeout)
        out.write(f"Removed controller {args.controller_id} with directory id "
                  f"{format_directory_id(args.controller_directory_id)}\n")
