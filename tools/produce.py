"""`minibroker produce`: one record per stdin line, in the manner of Kafka's
kafka-console-producer.sh, built on client.Producer.

    printf 'k1:hello\\nk2:world\\n' | minibroker produce orders \\
        --bootstrap-server 127.0.0.1:9092 --key-separator : --compression zstd

Each line (without its trailing "\\n", or "\\r\\n") is one record's value. With
--key-separator the line is split at the first separator into key and value; a line without
the separator is reported on stderr and skipped (as the console producer's parse.key does).
Every record is awaited before the command exits. `--property key=value` passes any
client.Producer setting by its Kafka name (linger.ms=0, enable.idempotence=false, ...).

Exit status 0 when every record sent was delivered (skipped lines do not change it); 1 when
any delivery failed or the producer could not be set up, such as when no bootstrap address
answers ("unable to bootstrap from [H:P]: cannot connect to H:P: ..."; one stderr line); 2 on a bad option,
--property or a malformed --bootstrap-server.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

import trio

from protocol.codecs import CODEC_NAMES

__all__ = ["add_arguments", "main", "parse_properties", "split_line"]

READ_CHUNK = 64 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="a broker to start from (comma-separated for several)")
    parser.add_argument("--key-separator", default=None, metavar="SEP",
                        help="split each line at the first SEP into key and value; lines "
                             "without SEP are reported and skipped")
    parser.add_argument("--compression", default=None, choices=CODEC_NAMES,
                        help="compression.type (default none)")
    parser.add_argument("--acks", default=None, metavar="N",
                        help="0, 1 or -1/all (default all)")
    parser.add_argument("--property", dest="properties", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="a producer setting by its Kafka name (repeatable)")


def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes] | None:
    """(key, value) of one line; None when a separator is wanted and missing."""
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        return None
    return key, value


def _coerce(kind: str, name: str, value: str) -> Any:
    """A --property string as the type the config field takes."""
    import client  # noqa: F401  (registers the producer and consumer configs)
    from client.config import config_kinds

    cls = config_kinds().get(kind)
    fields = {f.name: f for f in dataclasses.fields(cls)} if cls else {}
    f = fields.get(name.replace(".", "_"))
    type_text = str(f.type) if f is not None else ""
    if "bool" in type_text:
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        return value
    if "int" in type_text or "float" in type_text:
        try:
            return int(value)
        except ValueError:
            try:
                return float(value) if "float" in type_text else value
            except ValueError:
                return value
    return value


def parse_properties(kind: str, items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--property expects key=value, got {item!r}")
        key = key.strip()
        out[key] = _coerce(kind, key, value)  # as given, so errors name it as typed
    return out


def _set(config: dict[str, Any], name: str, value: Any) -> None:
    """An explicit option wins over the same setting given with --property."""
    for key in [k for k in config if k.replace(".", "_") == name]:
        del config[key]
    config[name] = value


def _acks(text: str) -> int | str:
    if text.lower() == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--acks expects 0, 1, -1 or all, got {text!r}") from None


async def _read_lines(stream) -> Any:
    """Yield stdin's lines (bytes, without the line end) as they arrive, reading in a
    thread so the producer's background tasks keep running while stdin is idle."""
    pending = b""
    while True:
        chunk = await trio.to_thread.run_sync(stream.read1, READ_CHUNK, abandon_on_cancel=True)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line[:-1] if line.endswith(b"\r") else line
    if pending:
        yield pending[:-1] if pending.endswith(b"\r") else pending


async def produce(args: argparse.Namespace, stdin, err) -> int:
    from client import Producer
    from client.errors import KafkaError
    from tools.admin_session import client_settings

    config = parse_properties("producer", args.properties)
    if args.compression is not None:
        _set(config, "compression_type", args.compression)
    if args.acks is not None:
        _set(config, "acks", _acks(args.acks))
    separator = args.key_separator.encode() if args.key_separator else None

    failures = 0
    handles: list[tuple[int, Any]] = []

    def report(line_no: int, error: BaseException) -> None:
        nonlocal failures
        failures += 1
        print(f"minibroker produce: record from line {line_no} to {args.topic} failed: "
              f"{error}", file=err)

    async def settle(only_done: bool) -> None:
        keep = []
        for line_no, handle in handles:
            if only_done and not handle.done():
                keep.append((line_no, handle))
                continue
            try:
                await handle
            except KafkaError as e:
                report(line_no, e)
        handles[:] = keep

    # entering connects to a bootstrap address first, so an unreachable broker is named as
    # such at once (KafkaConnectionError), not as a topic missing from the metadata later
    async with Producer(bootstrap_servers=args.bootstrap_server,
                        **{**client_settings.get(), **config}) as producer:
        line_no = 0
        async for line in _read_lines(stdin):
            line_no += 1
            parsed = split_line(line, separator)
            if parsed is None:
                print(f"minibroker produce: line {line_no}: no key separator "
                      f"{args.key_separator!r} in {line.decode('utf-8', 'replace')!r}; "
                      f"skipped", file=err)
                continue
            key, value = parsed
            handles.append((line_no, await producer.send(args.topic, value, key=key)))
            if len(handles) >= 10_000:
                await settle(only_done=True)
        await producer.flush()
        await settle(only_done=False)
    return 1 if failures else 0


def main(args: argparse.Namespace) -> int:
    from client.errors import KafkaConnectionError, KafkaError
    from tools.admin_session import ToolError

    try:
        return trio.run(produce, args, sys.stdin.buffer, sys.stderr)
    except (ValueError, TypeError) as e:
        print(f"minibroker produce: {e}", file=sys.stderr)
        return 2
    except ToolError as e:
        print(f"minibroker produce: {e}", file=sys.stderr)
        return 1
    except KafkaConnectionError as e:  # no bootstrap address answered: named, with reasons
        print(f"minibroker produce: {e.message or e}", file=sys.stderr)
        return 1
    except (KafkaError, OSError) as e:
        print(f"minibroker produce: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
