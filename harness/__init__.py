"""What the tests and the benchmarks both need to run brokers from outside, written once.

    ports.py    a free TCP port
    wait.py     waiting on a condition with a deadline (plain and trio)
    raw.py      a raw request on a socket through our sans-IO codec
    broker.py   one broker process, started with the pinned serve command, until it answers
    cluster.py  N combined nodes as processes, and each node's own view of the cluster
    certs.py    a test CA and broker and client certificates (scripts/make_certs.sh)

It sits below bench/ and tests/, which import it, and above protocol/, broker/ and client/:
it never imports bench/, tests/, tools/ or cli/ (tests/test_layout.py holds that).
"""
