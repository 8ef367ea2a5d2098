"""`minibroker bench authorizer`: what one authorize() call costs with 10, 1,000 and 10,000
ACLs, through the index (broker.security.acls.AclIndex, what the broker uses) beside a scan
of every ACL (`scan`, the reference the index is tested against).

    minibroker bench authorizer [--sizes 10,1000,10000] [--calls 20000] [--seed 1]

The ACL sets are random but realistic: a third literal topic ACLs, a third prefixed, the
rest group ACLs, over 200 principals and a few hosts, plus a wildcard ACL. The questions are
topics of ~20 characters for principals that exist. Prints one line per size: ns per call
for each and the speed-up. Pure CPU, no broker: no extra needed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid

from broker.controller.image import AclBinding
from broker.security.acls import (
    AclOperation, AclPermissionType, PatternType, ResourceType, StandardAuthorizer, scan,
)

_OPS = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL]


def _name(rng: random.Random) -> str:
    return f"{rng.choice(['orders', 'payments', 'audit', 'events'])}-{rng.randrange(10**6):06d}"


def acl_set(size: int, rng: random.Random) -> dict[uuid.UUID, AclBinding]:
    out = {uuid.UUID(int=0): AclBinding(ResourceType.TOPIC, "*", PatternType.LITERAL,
                                        "User:ops", "*", AclOperation.DESCRIBE,
                                        AclPermissionType.ALLOW)}
    for i in range(1, size):
        kind = i % 3
        name = _name(rng)
        out[uuid.UUID(int=i)] = AclBinding(
            ResourceType.GROUP if kind == 2 else ResourceType.TOPIC,
            name[:rng.randrange(3, 12)] if kind == 1 else name,
            PatternType.PREFIXED if kind == 1 else PatternType.LITERAL,
            f"User:u{rng.randrange(200)}", rng.choice(["*", "*", "10.0.0.1", "10.0.0.2"]),
            rng.choice(_OPS),
            AclPermissionType.DENY if rng.random() < 0.1 else AclPermissionType.ALLOW)
    return out


def measure(size: int, calls: int, seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    acls = acl_set(size, rng)
    questions = [(f"User:u{rng.randrange(200)}", "10.0.0.1", rng.choice(_OPS[:3]),
                  ResourceType.TOPIC, _name(rng)) for _ in range(calls)]
    authorizer = StandardAuthorizer()
    authorizer.index(acls)  # built once per image, as the broker does; not timed
    started = time.perf_counter_ns()
    for principal, host, op, rtype, name in questions:
        authorizer.authorize(acls, principal, host, op, rtype, name)
    indexed = (time.perf_counter_ns() - started) / calls
    bindings = list(acls.values())
    sample = questions[:max(1, min(calls, 200_000 // max(size, 1)))]  # a scan is slow
    started = time.perf_counter_ns()
    for principal, host, op, rtype, name in sample:
        scan(bindings, principal, host, op, rtype, name)
    scanned = (time.perf_counter_ns() - started) / len(sample)
    return indexed, scanned


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minibroker bench authorizer")
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    print(f"{'ACLs':>8} {'index ns/call':>14} {'scan ns/call':>13} {'speed-up':>9}")
    for size in (int(s) for s in args.sizes.split(",") if s):
        indexed, scanned = measure(size, args.calls, args.seed)
        print(f"{size:>8} {indexed:>14.0f} {scanned:>13.0f} {scanned / indexed:>8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
