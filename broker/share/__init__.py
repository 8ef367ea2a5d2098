"""broker.share: the share partitions a broker leads (KIP-932, queues for Kafka): the pure
share-partition state machine, share sessions, and the manager that serves ShareFetch
and ShareAcknowledge from them."""
