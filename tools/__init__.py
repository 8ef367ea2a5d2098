"""Operator tools behind `minibroker` subcommands: `dump-log` (read segment files, like
kafka-dump-log.sh) and `groups` (list and describe consumer groups over the wire, like
kafka-consumer-groups.sh). Neither runs inside the broker."""
