"""The controller's AlterClientQuotas (KIP-546): the ClientQuotaRecords it writes, replayed
into the image and kept by snapshots, with Kafka's checks of each entry (INVALID_REQUEST,
nothing written for a refused entry), and validate_only writing nothing."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from broker.controller.image import MetadataImage
from broker.controller.quota_control import alter_client_quotas
from broker.controller.snapshot import encode_snapshot, load_snapshot
from protocol.errors import ErrorCode as E
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record


def entry(entity: dict, **ops: float | None) -> NS:
    return NS(entity=[NS(entity_type=t, entity_name=n) for t, n in entity.items()],
              ops=[NS(key=k, value=0.0 if v is None else v, remove=v is None)
                   for k, v in ops.items()])


def alter(image: MetadataImage, *entries: NS,
          validate_only: bool = False) -> tuple[MetadataImage, list, list]:
    records, response = alter_client_quotas(image, NS(entries=list(entries),
                                                      validate_only=validate_only))
    image = image.replay(decode_metadata_record(encode_metadata_record(*r)) for r in records)
    return image, records, [(r["error_code"], r["error_message"]) for r in response["entries"]]


def test_set_change_and_remove_keys_by_user_client_both_and_defaults():
    image, records, results = alter(
        MetadataImage.EMPTY,
        entry({"client-id": "c1"}, producer_byte_rate=1024, consumer_byte_rate=2048),
        entry({"user": "alice", "client-id": "c1"}, request_percentage=12.5),
        entry({"user": None}, controller_mutation_rate=3.5),
        entry({"client-id": None}, producer_byte_rate=100))
    assert [r[0] for r in results] == [E.NONE] * 4
    assert all(r[0] == T.CLIENT_QUOTA_RECORD for r in records) and len(records) == 5
    assert dict(image.client_quotas) == {
        (("client-id", "c1"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        (("client-id", "c1"), ("user", "alice")): {"request_percentage": 12.5},
        (("user", None),): {"controller_mutation_rate": 3.5},
        (("client-id", None),): {"producer_byte_rate": 100.0}}
    image, records, results = alter(
        image, entry({"client-id": "c1"}, producer_byte_rate=1024, consumer_byte_rate=None),
        entry({"user": None}, controller_mutation_rate=None))
    assert results == [(E.NONE, None)] * 2
    # an unchanged value writes nothing; the last key removed takes the entity with it
    assert len(records) == 2
    assert dict(image.client_quotas[(("client-id", "c1"),)]) == {"producer_byte_rate": 1024.0}
    assert (("user", None),) not in image.client_quotas


@pytest.mark.parametrize("bad,message", [
    (entry({"client-id": "c1"}, producer_byte_rate=-1), "must be a non-negative number"),
    (entry({"client-id": "c1"}, bogus_rate=5), "Invalid configuration key bogus_rate"),
    (entry({"client-id": "c1"}, producer_byte_rate=1.5), "must be a Long value"),
    (entry({"client-id": "c1"}, request_percentage=float("nan")), "non-negative"),
    (entry({"group": "g"}, producer_byte_rate=5), "Unhandled client quota entity type: group"),
    (entry({}, producer_byte_rate=5), "Invalid empty client quota entity"),
    (entry({"user": ""}, producer_byte_rate=5), "Empty user not supported"),
    (entry({"ip": "10.0.0.1", "user": "a"}, connection_creation_rate=5),
     "Invalid empty client quota entity"),
    (entry({"ip": "10.0.0.1"}, producer_byte_rate=5), "Invalid configuration key"),
    (entry({"ip": "not an ip"}, connection_creation_rate=5), "is not a valid IP"),
])
def test_a_refused_entry_answers_invalid_request_and_writes_nothing(bad: NS, message: str):
    start, _, _ = alter(MetadataImage.EMPTY, entry({"client-id": "c1"}, producer_byte_rate=7))
    # a valid key beside the bad one is not written either
    bad.ops.append(NS(key="consumer_byte_rate", value=99.0, remove=False))
    image, records, results = alter(start, bad, entry({"client-id": "c2"},
                                                      producer_byte_rate=5))
    (code, text), other = results
    assert code == E.INVALID_REQUEST and message in text
    assert other == (E.NONE, None)
    assert len(records) == 1 and dict(image.client_quotas) == {
        (("client-id", "c1"),): {"producer_byte_rate": 7.0},
        (("client-id", "c2"),): {"producer_byte_rate": 5.0}}


def test_duplicate_keys_and_entities_are_refused_as_kafka_words_them():
    twice = entry({"client-id": "c1"}, producer_byte_rate=5)
    twice.ops.append(NS(key="producer_byte_rate", value=6.0, remove=False))
    _, records, results = alter(MetadataImage.EMPTY, twice)
    assert records == [] and results[0][0] == E.INVALID_REQUEST
    assert "Duplicate quota key producer_byte_rate" in results[0][1]
    _, records, results = alter(MetadataImage.EMPTY,
                                entry({"user": "a", "client-id": "c"}, producer_byte_rate=1),
                                entry({"client-id": "c", "user": "a"}, consumer_byte_rate=1))
    assert records == [] and [r[0] for r in results] == [E.INVALID_REQUEST] * 2
    assert "Ignoring duplicate entity" in results[0][1]


def test_validate_only_answers_the_same_and_writes_nothing():
    image, records, results = alter(MetadataImage.EMPTY,
                                    entry({"user": "alice"}, producer_byte_rate=10),
                                    entry({"user": "bob"}, producer_byte_rate=-10),
                                    validate_only=True)
    assert records == [] and image.client_quotas == MetadataImage.EMPTY.client_quotas
    assert [r[0] for r in results] == [E.NONE, E.INVALID_REQUEST]


def test_quotas_survive_a_snapshot():
    image, _, _ = alter(MetadataImage.EMPTY,
                        entry({"user": None, "client-id": None}, producer_byte_rate=1),
                        entry({"user": "alice"}, consumer_byte_rate=2),
                        entry({"ip": None}, connection_creation_rate=3))
    restored, _ = load_snapshot(encode_snapshot(image))
    assert restored.client_quotas == image.client_quotas
