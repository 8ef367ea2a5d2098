#!/opt/minibroker/bin/python
"""The container's healthcheck: healthy means this broker is registered and unfenced.

A broker opens its client listener only once the controller has unfenced it
(broker/server.py), so the probe connects to the internal listener and asks for Metadata:
the answer must list this node among the live brokers, which it does once its registration
is in the broker's own metadata image. Exit 0 healthy, 1 not (Docker's convention).

Docker runs this every second in each container for as long as the cluster runs, so it is
standard library only: a Metadata v1 request for no topics, written and read by hand
(importing the protocol package would cost more CPU than the broker spends idling).

    minibroker-healthcheck NODE_ID [HOST:PORT]   (default 127.0.0.1:9092)
"""

import socket
import struct
import sys

METADATA, VERSION, CORRELATION_ID = 3, 1, 1
CLIENT_ID = b"healthcheck"


def _request() -> bytes:
    # header v1: api_key, api_version, correlation_id, client_id; body v1: topics = [] (none)
    body = struct.pack(">hhih", METADATA, VERSION, CORRELATION_ID, len(CLIENT_ID))
    body += CLIENT_ID + struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data


def live_brokers(host: str, port: int) -> list[int]:
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.settimeout(5)
        sock.sendall(_request())
        (size,) = struct.unpack(">i", _read_exactly(sock, 4))
        response = _read_exactly(sock, size)
    correlation_id, count = struct.unpack_from(">ii", response, 0)
    if correlation_id != CORRELATION_ID:
        raise ConnectionError(f"answer to correlation id {correlation_id}")
    pos, nodes = 8, []
    for _ in range(count):  # node_id, host (string), port, rack (nullable string)
        (node_id,) = struct.unpack_from(">i", response, pos)
        (host_len,) = struct.unpack_from(">h", response, pos + 4)
        pos += 6 + host_len + 4
        (rack_len,) = struct.unpack_from(">h", response, pos)
        pos += 2 + max(rack_len, 0)
        nodes.append(node_id)
    return sorted(nodes)


def main(argv: list[str]) -> int:
    node_id = int(argv[0])
    host, _, port = (argv[1] if len(argv) > 1 else "127.0.0.1:9092").rpartition(":")
    try:
        live = live_brokers(host, int(port))
    except (OSError, struct.error) as e:
        print(f"broker {node_id} is not serving clients yet: {e}", file=sys.stderr)
        return 1
    if node_id not in live:
        print(f"broker {node_id} is not among the live brokers {live}", file=sys.stderr)
        return 1
    print(f"broker {node_id} registered and unfenced; live brokers {live}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
