"""The controller's delegation tokens (Kafka's DelegationTokenControlManager): creation with
Kafka's lifetimes and an HMAC from the secret, renewal and expiry by HMAC for the owner,
requester or a renewer only, the errors, and the periodic sweep of expired tokens through
QuorumController.tick on an injected clock. Records are replayed through their bytes, and
a snapshot of the image gives the tokens back."""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
from types import SimpleNamespace as NS

from broker.controller import delegation_token_control as tokens
from broker.controller.image import MetadataImage
from broker.controller.quorum_controller import ControllerSettings, QuorumController
from broker.controller.snapshot import encode_snapshot, load_snapshot
from protocol.errors import ErrorCode as E
from protocol.metadata_records import MetadataRecordType as T
from protocol.metadata_records import decode_metadata_record, encode_metadata_record

SECRET = "s3cret-key"
HOUR, DAY = 3_600_000, 86_400_000
SETTINGS = ControllerSettings(node_id=1, voters=(1,), delegation_token_secret_key=SECRET,
                              delegation_token_max_lifetime_ms=7 * DAY,
                              delegation_token_expiry_time_ms=DAY,
                              delegation_token_expiry_check_interval_ms=HOUR)
T0 = 1_700_000_000_000


def replay(image: MetadataImage, records) -> MetadataImage:
    return image.replay(decode_metadata_record(encode_metadata_record(*r)) for r in records)


def ids():
    n = iter(range(1000))
    return lambda: f"token-{next(n)}"


def create(image, principal="User:alice", *, renewers=(), max_lifetime_ms=-1, owner=None,
           now=T0, settings=SETTINGS):
    body = NS(renewers=[NS(principal_type="User", principal_name=r) for r in renewers],
              max_lifetime_ms=max_lifetime_ms, owner_principal_type="User" if owner else None,
              owner_principal_name=owner)
    body.get = lambda name, default=None: getattr(body, name, default)
    records, response = tokens.create(image, body, principal, now, settings, ids())
    return replay(image, records), records, response


def test_a_token_has_kafkas_lifetimes_and_an_hmac_of_its_id():
    image, records, r = create(MetadataImage.EMPTY, renewers=["bob"])
    assert r["error_code"] == E.NONE and r["token_id"] == "token-0"
    assert r["hmac"] == hmac.new(SECRET.encode(), b"token-0", hashlib.sha512).digest()
    assert (r["issue_timestamp_ms"], r["expiry_timestamp_ms"], r["max_timestamp_ms"]) == (
        T0, T0 + DAY, T0 + 7 * DAY)
    assert (r["principal_type"], r["principal_name"]) == ("User", "alice")
    assert r["token_requester_principal_name"] == "alice"
    token = image.delegation_tokens["token-0"]
    assert (token.owner, token.requester, token.renewers) == ("User:alice", "User:alice",
                                                              ("User:bob",))
    assert [t for t, _, _ in records] == [T.DELEGATION_TOKEN_RECORD]
    # the HMAC is never written down
    assert r["hmac"] not in encode_metadata_record(*records[0])


def test_a_shorter_requested_lifetime_caps_both_times_and_an_owner_may_be_named():
    _, _, r = create(MetadataImage.EMPTY, max_lifetime_ms=HOUR, owner="carol")
    assert (r["expiry_timestamp_ms"], r["max_timestamp_ms"]) == (T0 + HOUR, T0 + HOUR)
    assert (r["principal_name"], r["token_requester_principal_name"]) == ("carol", "alice")


def test_no_secret_no_tokens():
    off = ControllerSettings(node_id=1, voters=(1,))
    image, records, r = create(MetadataImage.EMPTY, settings=off)
    assert r["error_code"] == E.DELEGATION_TOKEN_AUTH_DISABLED and records == []
    _, renewal = tokens.renew(image, NS(hmac=b"x", renew_period_ms=-1), "User:alice", T0, off)
    assert renewal["error_code"] == E.DELEGATION_TOKEN_AUTH_DISABLED


def test_renewal_by_owner_requester_or_renewer_within_the_maximum():
    image, _, r = create(MetadataImage.EMPTY, renewers=["bob"], owner="carol")
    mac = r["hmac"]
    for who in ("User:carol", "User:alice", "User:bob"):  # owner, requester, renewer
        records, renewal = tokens.renew(image, NS(hmac=mac, renew_period_ms=HOUR), who,
                                        T0 + 10, SETTINGS)
        assert renewal == {"error_code": E.NONE, "expiry_timestamp_ms": T0 + 10 + HOUR,
                           "throttle_time_ms": 0}
    _, refused = tokens.renew(image, NS(hmac=mac, renew_period_ms=HOUR), "User:mallory", T0,
                              SETTINGS)
    assert refused["error_code"] == E.DELEGATION_TOKEN_OWNER_MISMATCH
    _, missing = tokens.renew(image, NS(hmac=b"not-a-token", renew_period_ms=HOUR),
                              "User:carol", T0, SETTINGS)
    assert missing["error_code"] == E.DELEGATION_TOKEN_NOT_FOUND
    # a token not renewed in time has expired
    _, expired = tokens.renew(image, NS(hmac=mac, renew_period_ms=-1), "User:carol",
                              T0 + DAY + 1, SETTINGS)
    assert expired["error_code"] == E.DELEGATION_TOKEN_EXPIRED


def test_no_renewal_goes_past_the_maximum():
    long_lived = ControllerSettings(node_id=1, voters=(1,), delegation_token_secret_key=SECRET,
                                    delegation_token_max_lifetime_ms=7 * DAY,
                                    delegation_token_expiry_time_ms=10 * DAY)
    image, _, r = create(MetadataImage.EMPTY, settings=long_lived)
    assert r["expiry_timestamp_ms"] == r["max_timestamp_ms"] == T0 + 7 * DAY
    records, renewal = tokens.renew(image, NS(hmac=r["hmac"], renew_period_ms=-1),
                                    "User:alice", T0 + 7 * DAY - 5, long_lived)
    assert renewal["expiry_timestamp_ms"] == T0 + 7 * DAY
    _, expired = tokens.renew(replay(image, records), NS(hmac=r["hmac"], renew_period_ms=-1),
                              "User:alice", T0 + 7 * DAY + 1, long_lived)
    assert expired["error_code"] == E.DELEGATION_TOKEN_EXPIRED


def test_expire_at_once_removes_and_a_period_moves_the_expiry():
    image, _, r = create(MetadataImage.EMPTY)
    records, answer = tokens.expire(image, NS(hmac=r["hmac"], expiry_time_period_ms=HOUR),
                                    "User:alice", T0 + 1, SETTINGS)
    assert answer["expiry_timestamp_ms"] == T0 + 1 + HOUR
    image = replay(image, records)
    assert image.delegation_tokens["token-0"].expiration_timestamp == T0 + 1 + HOUR
    records, answer = tokens.expire(image, NS(hmac=r["hmac"], expiry_time_period_ms=-1),
                                    "User:alice", T0 + 2, SETTINGS)
    assert answer == {"error_code": E.NONE, "expiry_timestamp_ms": T0 + 2,
                      "throttle_time_ms": 0}
    assert [t for t, _, _ in records] == [T.REMOVE_DELEGATION_TOKEN_RECORD]
    assert replay(image, records).delegation_tokens == {}


def test_tokens_survive_a_snapshot():
    image, _, _ = create(MetadataImage.EMPTY, renewers=["bob"])
    restored, _records = load_snapshot(encode_snapshot(image))
    assert restored.delegation_tokens == image.delegation_tokens


def test_the_controller_sweeps_expired_tokens_every_check_interval():
    controller = QuorumController(SETTINGS, random.Random(7))
    controller.replay(decode_metadata_record(encode_metadata_record(*r))
                      for r in controller.activate(T0).records)
    assert controller.next_deadline() <= T0 + HOUR
    body = NS(renewers=[], max_lifetime_ms=-1, owner_principal_type=None,
              owner_principal_name=None)
    body.get = lambda name, default=None: getattr(body, name, default)
    result = controller.create_delegation_token(body, "User:alice", T0)
    token_id = result.response["token_id"]
    # a Kafka Uuid: 16 random bytes in URL-safe base64 without padding
    assert len(base64.urlsafe_b64decode(token_id + "==")) == 16
    controller.replay(decode_metadata_record(encode_metadata_record(*r))
                      for r in result.records)
    def sweep(now: int) -> list[str]:
        results = controller.tick(now)
        controller.replay(decode_metadata_record(encode_metadata_record(*r))
                          for res in results for r in res.records)
        return [r[2]["token_id"] for res in results for r in res.records
                if r[0] == T.REMOVE_DELEGATION_TOKEN_RECORD]

    assert sweep(T0 + HOUR) == []  # the first check: the token lives a day
    assert sweep(T0 + DAY) == []  # a check exactly at its expiry keeps it
    assert sweep(T0 + DAY + 1) == []  # the next check is an hour after the last
    assert controller.image.delegation_tokens.keys() == {token_id}
    assert sweep(T0 + DAY + HOUR) == [token_id]
    assert controller.image.delegation_tokens == {}
