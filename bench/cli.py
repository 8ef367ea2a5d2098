"""`minibroker bench ...`: dispatch to one benchmark by its first word.

    minibroker bench produce|consume ...   throughput with confluent-kafka (bench.throughput)
    minibroker bench groups ...            group formation and commit rate (bench.groups)
    minibroker bench client ...            our client beside kafka-python and confluent-kafka
    minibroker bench rebalance ...         rolling bounce, eager against cooperative
"""

from __future__ import annotations

import importlib
import sys

_MODULES = {"groups": "bench.groups", "client": "bench.clients", "rebalance": "bench.rebalance"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    module = _MODULES.get(argv[0]) if argv else None
    if module is not None:
        return importlib.import_module(module).main(argv[1:])
    from bench import throughput
    return throughput.main(argv)


if __name__ == "__main__":
    sys.exit(main())
