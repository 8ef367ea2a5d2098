"""The cluster's control plane: the KRaft metadata quorum and the controller on it.

Owns, today, pure code (only metadata_log.py does I/O, and nothing reads a clock; a runtime
hands in messages, ticks and `now_ms`, and carries out the effects):
- the Raft state machine of the metadata quorum (KIP-595) in `raft.py`, its in-memory view
  of the `__cluster_metadata` log in `raft_log.py`, the persisted election state
  (Kafka's quorum-state file) in `quorum_state.py`, and that log, quorum-state and the
  snapshots on disk in `metadata_log.py` (synchronous file I/O, the one module here that
  does any);
- replica placement across brokers and racks in `placement.py` (Kafka's
  StripedReplicaPlacer / AdminUtils.assignReplicasToBrokers);
- partition leader election and ISR changes in `election.py` (Kafka's
  PartitionChangeBuilder);
- the quorum's messages as Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and FetchSnapshot
  bodies, and the DescribeQuorum answer, in `raft_codec.py`;
- the metadata image that replaying the metadata records gives, in `image.py` (Kafka's
  MetadataImage and its deltas);
- the active controller, which turns requests into metadata records and a response:
  `quorum_controller.py` (Kafka's QuorumController) routes each request to a control
  manager, `cluster_control.py` (brokers: registration, heartbeats, fencing),
  `replication_control.py` (topics, partitions, elections, ISR changes), `config_control.py`,
  `scram_control.py`, `acl_control.py`, `producer_id_control.py` and `activation.py` (the
  records a new active controller writes), all sharing `controller_result.py`.

The trio runtime that drives them is `runtime.py` (carrying out RaftNode's effects onto the
`metadata_log` store and, through `transport.py`, the network), assembled by `wiring.py`;
`api.py` maps the controller APIs onto QuorumController operations.
"""
