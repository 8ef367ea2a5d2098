"""The transaction coordinator: transactional ids, their producer ids and epochs, and the
state of each one's transaction (Kafka's kafka.coordinator.transaction).

Pure, as broker.coordinator's core is (docs/ARCHITECTURE.md §4, §5): `state` holds the
states and one transactional id's metadata, `records` the __transaction_state record,
`effects` what the coordinator asks of its runtime, `coordinator` the facade.
"""
