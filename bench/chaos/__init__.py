"""The Jepsen-style fault harness: `minibroker chaos` (docs/RELIABILITY.md).

    history.py   the JSON-lines history every operation is recorded in
    checker.py   what a history must not show (lost writes, duplicates, order, ...)
    replicas.py  every replica's records, offset by offset, and their comparison
    nemesis.py   the seeded fault schedule and the faults themselves
    targets.py   the clusters faults are aimed at: local processes or the compose cluster
    workload.py  producers and group consumers that record what they did
    runner.py    one run: cluster, workload, faults, heal, drain, check, report
    cli.py       the command line
"""
