"""The broker's own connections to other nodes of the cluster.

Owns, in `peer.py`, `PeerChannel`: one pipelined request/response connection from this node
to another node's listener, which carries the Raft messages between voters, a broker's
registration and heartbeats to the active controller, and admin requests forwarded to it.
The client library has its own connections; the broker never imports it (the layout rule),
so this is the broker's, built on the same sans-IO `protocol.connection`.
"""
