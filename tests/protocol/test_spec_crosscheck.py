"""Our declarations against Apache Kafka's own JSON message definitions.

For every version we implement, each field Kafka declares must be declared by us with the
same type, presence, nullability, tag and default, and we must declare nothing Kafka does
not. Skipped when ../shared/kafka-spec is absent (it is reference data, not part of the
project).

The reference copy is Kafka as of October 2024. A version released since (Produce v12 and
Metadata v13 in Kafka 4.0) is checked against a newer copy of the same JSON files: the one
kafka-python 3 ships as its own protocol source (`kafka/protocol/schemas/resources`, Kafka
4.1 or later), read in place from the test environment.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from protocol import consumer_protocol, metadata_records
from protocol.messages import (APIS, CONTROLLER_APIS, PENDING_APIS, envelope, offsets_topic,
                               quorum, share_state, transaction_log)
from protocol.schema import F, Message, Struct, Versions

# ../shared/kafka-spec beside the checkout; a worktree sits one level deeper, so look upward
SPEC_ROOT = next((d / "shared" / "kafka-spec" for d in Path(__file__).resolve().parents[3:]
                  if (d / "shared" / "kafka-spec").is_dir()),
                 Path(__file__).resolve().parents[3] / "shared" / "kafka-spec")
SPEC = SPEC_ROOT / "clients"
pytestmark = pytest.mark.skipif(not SPEC.is_dir(), reason="../shared/kafka-spec is absent")

# Declarations that are not request/response pairs, and where Kafka keeps their JSON.
DATA_MESSAGES = [
    (consumer_protocol.ConsumerProtocolSubscription, "clients"),
    (consumer_protocol.ConsumerProtocolAssignment, "clients"),
    (envelope.DefaultPrincipalData, "clients"),
    (offsets_topic.OffsetCommitKey, "group-coordinator"),
    (offsets_topic.OffsetCommitValue, "group-coordinator"),
    (offsets_topic.GroupMetadataKey, "group-coordinator"),
    (offsets_topic.GroupMetadataValue, "group-coordinator"),
    *((message, "group-coordinator") for pair in offsets_topic.CONSUMER_GROUP_RECORDS.values()
      for message in pair),
    *((message, "group-coordinator") for pair in offsets_topic.SHARE_GROUP_RECORDS.values()
      for message in pair),
    *((record, "metadata") for record in metadata_records.METADATA_RECORDS.values()),
    (transaction_log.TransactionLogKey, "transaction-coordinator"),
    (transaction_log.TransactionLogValue, "transaction-coordinator"),
    (share_state.ShareSnapshotKey, "share-coordinator"),
    (share_state.ShareSnapshotValue, "share-coordinator"),
    (quorum.VotersRecord, "clients"),
    (quorum.KRaftVersionRecord, "clients"),
    (share_state.ShareUpdateKey, "share-coordinator"),
    (share_state.ShareUpdateValue, "share-coordinator"),
]

_NUMERIC = {"int8", "int16", "int32", "int64", "uint16", "uint32"}


def _newer_spec() -> Path | None:
    """kafka-python's copy of Kafka's client message definitions, newer than SPEC."""
    found = importlib.util.find_spec("kafka")
    if found is None or found.origin is None:
        return None
    folder = Path(found.origin).parent / "protocol" / "schemas" / "resources"
    return folder if folder.is_dir() else None


NEWER_SPEC = _newer_spec()


def _read(path: Path) -> dict:
    text = "\n".join(line for line in path.read_text().splitlines()
                     if not line.strip().startswith("//"))
    return json.loads(text)


def _load(name: str, folder: str = "clients") -> dict:
    return _read(SPEC_ROOT / folder / f"{name}.json")


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    return re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s).lower()


def _kafka_type(f: dict, common: dict) -> tuple[str, list | None]:
    t = f["type"]
    nested = f.get("fields")
    if t.startswith("[]") and (nested is not None or t[2:] in common):
        return "[]struct", nested if nested is not None else common[t[2:]]
    if nested is not None or t in common:
        return "struct", nested if nested is not None else common[t]
    return t, None


def _our_type(f: F) -> tuple[str, list | None]:
    if isinstance(f.type, list):
        return "[]struct", f.type
    if isinstance(f.type, Struct):
        return "struct", f.type.fields
    return f.type, None


def _compare(kfields: list, ours: list[F], versions: range, common: dict, path: str,
             problems: list[str]) -> None:
    by_name = {f.name: f for f in ours}
    seen = set()
    for kf in kfields:
        kv = Versions.parse(_field_versions(kf))
        live = [v for v in versions if v in kv]
        if not live:
            continue
        name = snake(kf["name"])
        where = f"{path}.{name}"
        of = by_name.get(name)
        if of is None:
            problems.append(f"{where}: missing (Kafka has it in {_field_versions(kf)})")
            continue
        seen.add(name)
        ktype, knested = _kafka_type(kf, common)
        otype, onested = _our_type(of)
        if ktype != otype:
            problems.append(f"{where}: type {otype}, Kafka {ktype}")
        kn = Versions.parse(kf.get("nullableVersions"))
        kt = Versions.parse(kf.get("taggedVersions"))
        for v in versions:
            if (v in kv) != (v in of.versions):
                problems.append(f"{where}: present in v{v} is {v in of.versions}, Kafka {v in kv}")
            if v in kv and (v in kn) != (v in of.nullable):
                problems.append(f"{where}: nullable in v{v} is {v in of.nullable}, Kafka {v in kn}")
            if v in kv and (v in kt) != (of.tag is not None and v in of.tagged):
                problems.append(f"{where}: tagged in v{v} differs from Kafka")
        # a few of Kafka's files spell the tag as a string ("tag": "0")
        ktag = kf.get("tag")
        if (None if ktag is None else int(ktag)) != of.tag:
            problems.append(f"{where}: tag {of.tag}, Kafka {ktag}")
        kd = kf.get("default")
        if ktype in _NUMERIC and kd is not None:
            if of.default_for(live[0]) != int(str(kd), 0):
                problems.append(f"{where}: default {of.default_for(live[0])}, Kafka {kd}")
        if ktype == "bool" and kd is not None:
            if of.default_for(live[0]) != (str(kd).lower() == "true"):
                problems.append(f"{where}: default {of.default_for(live[0])}, Kafka {kd}")
        if knested is not None and onested is not None:
            _compare(knested, onested, range(live[0], live[-1] + 1), common, where, problems)
    for name in {f.name for f in ours if any(v in f.versions for v in versions)} - seen:
        problems.append(f"{path}.{name}: declared by us but not by Kafka in our versions")
    # positional fields travel in declaration order, so the order must be Kafka's too
    for v in versions:
        kafka_order = [snake(kf["name"]) for kf in kfields if _positional(kf, v)]
        our_order = [f.name for f in ours if v in f.versions
                     and not (f.tag is not None and v in f.tagged)]
        if our_order != kafka_order and set(our_order) == set(kafka_order):
            problems.append(f"{path}: field order in v{v} is {our_order}, Kafka {kafka_order}")


def _field_versions(kf: dict) -> str:
    """A field's versions; a tagged field may give only its taggedVersions (as three of
    TransactionLogValue's do), which Kafka's generator then takes for both."""
    return kf["versions"] if "versions" in kf else kf["taggedVersions"]


def _claims_unstable(request: dict, version: int) -> bool:
    """Whether `version` is the newest of an API whose request Kafka marks unstable."""
    high = Versions.parse(request["validVersions"]).high
    return bool(request.get("latestVersionUnstable")) and high is not None and version >= high


def _positional(kf: dict, version: int) -> bool:
    return (version in Versions.parse(_field_versions(kf))
            and version not in Versions.parse(kf.get("taggedVersions")))


# APIs newer than both copies (Kafka 4.1's share group offsets admin APIs, keys 90-92):
# checked byte by byte against Kafka 4.1's definitions in
# tests/protocol/test_share_offsets_messages.py.
NEWER_THAN_BOTH_COPIES = {"DescribeShareGroupOffsets", "AlterShareGroupOffsets",
                          "DeleteShareGroupOffsets"}


def _messages():
    for api in [*APIS.values(), *CONTROLLER_APIS.values(), *PENDING_APIS.values()]:
        if api.name in NEWER_THAN_BOTH_COPIES:
            continue
        yield api.request, "clients"
        yield api.response, "clients"
    yield from DATA_MESSAGES


# The share groups' data-plane and share-state APIs: v0 as in the snapshot (Kafka 4.0's early
# access); ShareFetch and ShareAcknowledge v1 (Kafka 4.1) are checked byte by byte against
# librdkafka's writer and parser in tests/protocol/test_share_messages.py.
SHARE_DATA_AND_STATE_APIS = {"ShareFetch", "ShareAcknowledge", "InitializeShareGroupState",
                             "ReadShareGroupState", "WriteShareGroupState",
                             "DeleteShareGroupState", "ReadShareGroupStateSummary"}

# APIs whose newest version the reference snapshot (October 2024) still marks unstable but
# Kafka 4.0 (March 2025) released: ConsumerGroupHeartbeat v1 (KIP-848's regular expressions
# and client-chosen member ids), which librdkafka requires for group.protocol=consumer, and
# EndTxn v5 (KIP-890 part 2: the epoch bumped at every transaction's end). Where the newer
# copy has the API, it must say so too (_check). And the KIP-932 share group membership
# APIs, early access (v0) in the snapshot and Kafka 4.0, released in Kafka 4.1 as v1 with
# v0's fields: v0 is compared with the snapshot field by field; v1 needs a newer copy, which
# kafka-python's lacks, so protocol/messages/share_group.py says where its fields come from.
STABLE_SINCE_THE_SNAPSHOT = {"ConsumerGroupHeartbeat", "EndTxn", "ShareGroupHeartbeat",
                             "ShareGroupDescribe", *SHARE_DATA_AND_STATE_APIS}


# Versions newer than the reference copy that kafka-python's newer copy lacks too (it ships
# no quorum APIs): checked byte by byte in tests/protocol/test_kraft_messages.py instead.
# Vote v2 is Kafka 4.0's PreVote (test_vote_v2_adds_pre_vote_after_the_last_offset).
CHECKED_BY_HAND = {"VoteRequest", "VoteResponse", "ShareFetchRequest", "ShareFetchResponse",
                   "ShareAcknowledgeRequest", "ShareAcknowledgeResponse"}


@pytest.mark.parametrize("message,folder", list(_messages()), ids=lambda m: getattr(m, "name", ""))
def test_declaration_matches_kafka_spec(message: Message, folder: str):
    spec = _load(message.name, folder)
    ours = message.versions
    snapshot_high = Versions.parse(spec["validVersions"]).high
    assert ours.high is not None and snapshot_high is not None
    versions = range(ours.low, min(ours.high, snapshot_high) + 1)
    _check(message, folder, spec, versions, lambda name: _load(name, folder))
    if ours.high > snapshot_high:
        if message.name in CHECKED_BY_HAND:
            return  # neither copy has them (kafka-python ships no quorum APIs)
        # released since the reference copy: checked against the newer one
        if NEWER_SPEC is None or not (NEWER_SPEC / f"{message.name}.json").is_file():
            pytest.skip(f"{message.name} v{snapshot_high + 1}+ needs a newer copy of Kafka's "
                        "definitions (kafka-python 3's)")
        newer = NEWER_SPEC
        _check(message, folder, _read(newer / f"{message.name}.json"),
               range(snapshot_high + 1, ours.high + 1),
               lambda name: _read(newer / f"{name}.json"))


def _check(message: Message, folder: str, spec: dict, versions: range, load) -> None:
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
    kafka_valid = Versions.parse(spec["validVersions"])
    assert all(v in kafka_valid for v in versions), "we claim versions Kafka does not have"
    api_name = message.name.removesuffix("Response").removesuffix("Request")
    if folder == "clients" and message.api_key is not None:
        # an API's newest version may be unstable (the flag is on its request): not ours yet
        request = load(api_name + "Request")
        if api_name in STABLE_SINCE_THE_SNAPSHOT:
            newer = NEWER_SPEC / f"{api_name}Request.json" if NEWER_SPEC else None
            if newer is not None and newer.is_file():
                assert not _claims_unstable(_read(newer), versions[-1]), \
                    "the newer copy calls it unstable too"
        else:
            assert not _claims_unstable(request, versions[-1]), \
                "we claim a version Kafka calls unstable"
    assert spec.get("apiKey") == message.api_key
    flexible = Versions.parse(spec.get("flexibleVersions"))
    assert [message.is_flexible(v) for v in versions] == [v in flexible for v in versions]
    problems: list[str] = []
    _compare(spec["fields"], message.fields, versions, common, message.name, problems)
    assert problems == []


def test_versions_past_the_reference_copy_are_checked_against_a_newer_one():
    """Produce v11-12, FindCoordinator v5-6, ListOffsets v8-10 and Metadata v13 are declared;
    the ones the October 2024 copy lacks are compared with the newer copy, which must be
    there, and which catches a wrong field in them."""
    assert NEWER_SPEC is not None, "kafka-python 3 (a test dependency) ships Kafka's JSON"
    from protocol.messages.metadata import MetadataResponse as right
    assert right.versions.high == 13
    assert Versions.parse(_load("MetadataResponse")["validVersions"]).high == 12
    spec = _read(NEWER_SPEC / "MetadataResponse.json")
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
    problems: list[str] = []
    _compare(spec["fields"], right.fields, range(13, 14), common, right.name, problems)
    assert problems == []
    wrong = Message(right.name, api_key=3, valid="0-13", flexible="9+",
                    fields=[f for f in right.fields if f.name != "error_code"])
    _compare(spec["fields"], wrong.fields, range(13, 14), common, wrong.name, problems)
    assert problems == ["MetadataResponse.error_code: missing (Kafka has it in 13+)"]


def test_crosscheck_catches_a_wrong_declaration():
    """The checker itself must fail on a declaration that differs from Kafka's."""
    wrong = Message("ProduceRequest", api_key=0, valid="3-10", flexible="9+", fields=[
        F("transactional_id", "string", "3+"),  # not nullable: wrong
        F("acks", "int32"),  # wrong type
    ])
    spec = _load("ProduceRequest")
    problems: list[str] = []
    _compare(spec["fields"], wrong.fields, range(3, 11), {}, "ProduceRequest", problems)
    assert any("transactional_id: nullable" in p for p in problems)
    assert any("acks: type int32" in p for p in problems)
    assert any("topic_data: missing" in p for p in problems)


def test_crosscheck_catches_a_wrong_metadata_record():
    """Tags Kafka spells as strings and bool defaults are compared too."""
    wrong = Message("RegisterBrokerRecord", api_key=0, valid="3", flexible="0+", fields=[
        F("fenced", "bool", default=False),  # Kafka: true
        F("log_dirs", "[]uuid", "3+", tag=1),  # Kafka: tag "0"
    ])
    spec = _load("RegisterBrokerRecord", "metadata")
    problems: list[str] = []
    _compare(spec["fields"], wrong.fields, range(3, 4), {}, "RegisterBrokerRecord", problems)
    assert any("fenced: default False" in p for p in problems)
    assert any("log_dirs: tag 1, Kafka 0" in p for p in problems)
    assert any("broker_id: missing" in p for p in problems)


def test_crosscheck_catches_wrong_order_bool_default_and_tag():
    """Field order, bool defaults and string-written tags ("tag": "0") are checked too."""
    wrong = Message("BrokerHeartbeatResponse", api_key=63, valid="0-1", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("is_fenced", "bool"),  # Kafka: default true, and after is_caught_up
        F("is_caught_up", "bool"),
        F("should_shut_down", "bool"),
    ])
    spec = _load("BrokerHeartbeatResponse")
    problems: list[str] = []
    _compare(spec["fields"], wrong.fields, range(0, 2), {}, wrong.name, problems)
    assert any("is_fenced: default False" in p for p in problems)
    assert any("field order in v0" in p for p in problems)

    request = Message("BrokerHeartbeatRequest", api_key=63, valid="0-1", flexible="0+", fields=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", default=-1),
        F("current_metadata_offset", "int64"),
        F("want_fence", "bool"),
        F("want_shut_down", "bool"),
        F("offline_log_dirs", "[]uuid", "1+", tag=1),  # Kafka: tag "0"
    ])
    spec = _load("BrokerHeartbeatRequest")
    problems = []
    _compare(spec["fields"], request.fields, range(0, 2), {}, request.name, problems)
    assert problems == ["BrokerHeartbeatRequest.offline_log_dirs: tag 1, Kafka 0"]


def test_the_quorum_versions_of_fetch_are_cross_checked():
    """Fetch is declared past what clients are served (v13+ for the KRaft quorum); the check
    above walks every declared version, so those are compared with Kafka's too."""
    checked = {m.name: m.versions for m, _folder in _messages()}
    assert checked["FetchRequest"].high >= 16 and checked["FetchResponse"].high >= 16
    assert "AllocateProducerIdsRequest" in checked and "AllocateProducerIdsResponse" in checked


def test_the_consumer_group_declarations_are_cross_checked():
    """KIP-848's APIs and __consumer_offsets records go through the same check, and
    ConsumerGroupHeartbeat goes up to v1 (unstable in the snapshot, released in Kafka 4.0)."""
    checked = {m.name: (m.versions, folder) for m, folder in _messages()}
    for name in ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe"):
        assert f"{name}Request" in checked and f"{name}Response" in checked
    assert checked["ConsumerGroupHeartbeatRequest"][0].high == 1
    spec_files = {p.stem for p in (SPEC_ROOT / "group-coordinator").glob("ConsumerGroup*.json")}
    ours = {name for name, (_v, folder) in checked.items()
            if folder == "group-coordinator" and name.startswith("ConsumerGroup")}
    assert ours == spec_files and len(ours) == 12


def test_the_share_group_declarations_are_cross_checked():
    """KIP-932's membership APIs and its seven __consumer_offsets records go through the
    same check; each record's key version is its Kafka record type (9-15)."""
    checked = {m.name: (m.versions, folder) for m, folder in _messages()}
    for name in ("ShareGroupHeartbeat", "ShareGroupDescribe"):
        assert checked[f"{name}Request"][0].high == 1 and f"{name}Response" in checked
    spec_files = {p.stem for p in (SPEC_ROOT / "group-coordinator").glob("ShareGroup*.json")}
    ours = {name for name, (_v, folder) in checked.items()
            if folder == "group-coordinator" and name.startswith("ShareGroup")}
    assert ours == spec_files and len(ours) == 14
    for record_type, (key, _value) in offsets_topic.SHARE_GROUP_RECORDS.items():
        assert Versions.parse(_load(key.name, "group-coordinator")["validVersions"]).low \
            == record_type


def test_crosscheck_catches_a_wrong_nullable_struct():
    """A struct's nullability (ConsumerGroupHeartbeatResponse.Assignment) is compared too."""
    from protocol.messages.consumer_group import ConsumerGroupHeartbeatResponse as right
    wrong = Message(right.name, api_key=68, valid="0", flexible="0+", fields=[
        *right.fields[:-1],
        F("assignment", Struct([F("topic_partitions", [F("topic_id", "uuid"),
                                                       F("partitions", "[]int32")])])),
    ])
    spec = _load(right.name)
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
    problems: list[str] = []
    _compare(spec["fields"], wrong.fields, range(0, 1), common, wrong.name, problems)
    assert problems == [f"{right.name}.assignment: nullable in v0 is False, Kafka True"]


def test_the_transaction_declarations_are_cross_checked():
    """Issue 25's APIs (pending) and the __transaction_state records go through the check,
    each at every version Kafka defines as stable, the ones newer than the reference too."""
    checked = {m.name: (m.versions, folder) for m, folder in _messages()}
    expected = {"AddPartitionsToTxn": 5, "AddOffsetsToTxn": 4, "EndTxn": 5,
                "WriteTxnMarkers": 2, "TxnOffsetCommit": 5, "DescribeProducers": 0,
                "DescribeTransactions": 0, "ListTransactions": 2}
    for name, high in expected.items():
        for kind in ("Request", "Response"):
            versions, folder = checked[name + kind]
            assert (versions.low, versions.high, folder) == (0, high, "clients"), name + kind
    spec_files = {p.stem for p in (SPEC_ROOT / "transaction-coordinator").glob("*.json")}
    assert spec_files == {name for name, (_v, folder) in checked.items()
                          if folder == "transaction-coordinator"}
    assert NEWER_SPEC is not None
    for name in ("EndTxnRequest", "WriteTxnMarkersRequest", "TxnOffsetCommitRequest",
                 "ListTransactionsRequest"):
        newer = _read(NEWER_SPEC / f"{name}.json")
        assert not newer.get("latestVersionUnstable")
        assert Versions.parse(newer["validVersions"]).high == checked[name][0].high


def test_crosscheck_catches_a_wrong_transaction_declaration():
    """The batched AddPartitionsToTxn v4+ and TransactionLogValue's tagged-only fields (no
    "versions" in Kafka's JSON) are compared like any other."""
    from protocol.messages.transactions import AddPartitionsToTxnRequest as right
    spec = _load(right.name)
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
    wrong = Message(right.name, api_key=24, valid="0-5", flexible="3+", fields=[
        F("transactions", [
            F("transactional_id", "string", "4+"),
            F("producer_id", "int64", "4+"),
            F("producer_epoch", "int16", "4+"),
            F("verify_only", "bool", "5+"),  # Kafka: 4+
            F("topics", [F("name", "string"), F("partitions", "[]int32")], "4+"),
        ], "4+"),
        *right.fields[1:],
    ])
    problems: list[str] = []
    _compare(spec["fields"], wrong.fields, range(0, 6), common, wrong.name, problems)
    assert problems == [f"{right.name}.transactions.verify_only: present in v4 is False, Kafka True"]

    value = transaction_log.TransactionLogValue
    spec = _load(value.name, "transaction-coordinator")
    wrong = Message(value.name, valid="0-1", flexible="1+", fields=[
        f if f.name != "next_producer_id" else F("next_producer_id", "int64", "1+", tag=3,
                                                   default=-1)
        for f in value.fields])
    problems = []
    _compare(spec["fields"], wrong.fields, range(0, 2), {}, wrong.name, problems)
    assert problems == [f"{value.name}.next_producer_id: tag 3, Kafka 1"]
