"""What the chaos runs (bench/chaos: real processes and containers) and the whole-cluster
simulation (sim/) share: the history format (`history`), its checkers (`checker`) and the
clients that write it (`workload`). Both judge a run by the same properties."""
