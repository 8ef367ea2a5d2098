"""Operator tools behind `minibroker` subcommands (cli.main dispatches to them): `dump-log`
(read segment files, like kafka-dump-log.sh), `groups`, `topics`, `configs`, `acls`,
`users`, `cluster` (admin requests over the wire, like Kafka's scripts), `produce` and
`consume`, and `analyze`. None runs inside the broker."""
