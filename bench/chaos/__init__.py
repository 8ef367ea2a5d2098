"""The Jepsen-style fault harness: `minibroker chaos` (docs/RELIABILITY.md).

    replicas.py  every replica's records, offset by offset, and their comparison
    nemesis.py   the seeded fault schedule and the faults themselves
    targets.py   the clusters faults are aimed at: local processes or the compose cluster
    runner.py    one run: cluster, workload, faults, heal, drain, check, report
    cli.py       the command line

The history format, its checkers and the clients that record it live in harness/chaos/,
shared with the whole-cluster simulation (sim/).
"""
