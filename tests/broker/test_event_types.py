"""The event declarations (broker/events.py) describe one table: spark_jobs reads every event
type into one `events` table with one column per field name, so a name must mean one JSON type
in every event that declares it."""

from __future__ import annotations

from broker.events import COMMON_FIELDS, EVENT_TYPES


def test_a_field_name_has_one_type_across_every_event():
    types: dict[str, set[str]] = {name: {t} for name, t in COMMON_FIELDS.items()}
    for fields in EVENT_TYPES.values():
        for name, json_type in fields.items():
            types.setdefault(name, set()).add(json_type)
    clashes = {name: sorted(t) for name, t in types.items() if len(t) > 1}
    assert clashes == {}
