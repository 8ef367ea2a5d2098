"""Replication of a partition from its leader to its followers."""
