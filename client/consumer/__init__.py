"""The consumer side of the client library.

Owns (docs/ARCHITECTURE.md §1): assignors/ (pure partition assignors, present
now), then membership (the pure member state machine), coordinator, fetcher and the
consumer itself; and the KIP-932 share consumer: share_state and share_membership (pure),
share_fetcher and share_consumer. This package imports nothing at load time so that importing the pure
assignors never pulls in trio or sockets.
"""
