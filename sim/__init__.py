"""The whole cluster in one deterministic simulation (`minibroker sim`, docs/RELIABILITY.md).

    network.py      connections between nodes and clients: latency, cuts, resets, pauses
    world.py        N real nodes (minibroker serve's own wiring) on simulated disks
    determinism.py  every random choice drawn from the seed
    faults.py       the seed's fault schedule: kills, restarts, partitions, pauses, resets
    invariants.py   what the nodes' state must never show, checked every 50 ms
    run.py          one seed: cluster, workload, faults, heal, settle, read, judge
    cli.py          `minibroker sim`: many seeds, a summary, a replay line per failure
"""
