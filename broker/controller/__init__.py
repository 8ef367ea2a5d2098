"""The cluster's control plane: the KRaft metadata quorum and, later, the controller on it.

Owns, today, pure code only (nothing here does I/O or reads a clock; a runtime hands in
messages, ticks and `now_ms`, and carries out the effects):
- the Raft state machine of the metadata quorum (KIP-595) in `raft.py`, its in-memory view
  of the `__cluster_metadata` log in `raft_log.py`, and the persisted election state
  (Kafka's quorum-state file) in `quorum_state.py`;
- replica placement across brokers and racks in `placement.py` (Kafka's
  StripedReplicaPlacer / AdminUtils.assignReplicasToBrokers);
- partition leader election and ISR changes in `election.py` (Kafka's
  PartitionChangeBuilder);
- the metadata image that replaying the metadata records gives, in `image.py` (Kafka's
  MetadataImage and its deltas);
- the active controller, which turns requests into metadata records and a response, with
  broker registration, heartbeats and fencing, in `quorum_controller.py` (Kafka's
  QuorumController and its control managers).

Still to come here: the trio runtime that drives `RaftNode` and the controller over the
network and the segment files.
"""
