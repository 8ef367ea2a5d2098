"""The controller's AlterUserScramCredentials: the records it writes, replayed into the
image, with Kafka's checks of each alteration and a user altered whole or not at all."""

from __future__ import annotations

import hashlib
import hmac
from types import SimpleNamespace as NS

from broker.controller.image import MetadataImage
from broker.controller.scram_control import alter_user_scram_credentials
from protocol.errors import ErrorCode as E
from protocol.metadata_records import decode_metadata_record, encode_metadata_record

SHA256, SHA512 = 1, 2
SALT = b"pepper-and-salt"


def salted(password: str, iterations: int = 4096) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode(), SALT, iterations)


def upsert(name: str, password: str = "secret", mechanism: int = SHA256,
           iterations: int = 4096, salt: bytes = SALT) -> NS:
    return NS(name=name, mechanism=mechanism, iterations=iterations, salt=salt,
              salted_password=salted(password, iterations))


def alter(image: MetadataImage, *, upsertions=(), deletions=()) -> tuple[MetadataImage, dict]:
    records, response = alter_user_scram_credentials(
        image, NS(upsertions=list(upsertions), deletions=list(deletions)))
    image = image.replay(decode_metadata_record(encode_metadata_record(*r)) for r in records)
    return image, {r["user"]: r["error_code"] for r in response["results"]}


def test_an_upsertion_keeps_the_derived_keys_and_never_the_password():
    image, results = alter(MetadataImage.EMPTY, upsertions=[upsert("alice", "s3cret")])
    assert results == {"alice": E.NONE}
    credential = image.scram_credentials[("alice", SHA256)]
    # RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(..)
    client_key = hmac.new(salted("s3cret"), b"Client Key", "sha256").digest()
    assert credential.stored_key == hashlib.sha256(client_key).digest()
    assert credential.server_key == hmac.new(salted("s3cret"), b"Server Key",
                                             "sha256").digest()
    assert (credential.salt, credential.iterations) == (SALT, 4096)


def test_one_refused_alteration_leaves_every_alteration_of_that_user_unwritten():
    image, results = alter(MetadataImage.EMPTY, upsertions=[
        upsert("alice"), upsert("alice", mechanism=SHA512, iterations=1), upsert("bob")])
    assert results == {"alice": E.UNACCEPTABLE_CREDENTIAL, "bob": E.NONE}
    assert sorted(image.scram_credentials) == [("bob", SHA256)]


def test_kafkas_checks_of_each_alteration():
    _, results = alter(MetadataImage.EMPTY, upsertions=[
        upsert(""), upsert("twice"), upsert("twice"), upsert("mech", mechanism=9),
        upsert("many", iterations=16385), upsert("nosalt", salt=b"")],
        deletions=[NS(name="ghost", mechanism=SHA256)])
    assert results == {"ghost": E.RESOURCE_NOT_FOUND, "": E.UNACCEPTABLE_CREDENTIAL,
                       "twice": E.DUPLICATE_RESOURCE, "mech": E.UNSUPPORTED_SASL_MECHANISM,
                       "many": E.UNACCEPTABLE_CREDENTIAL, "nosalt": E.UNACCEPTABLE_CREDENTIAL}


def test_a_deletion_removes_only_the_named_mechanism():
    image, _ = alter(MetadataImage.EMPTY, upsertions=[upsert("alice"),
                                                      upsert("alice", mechanism=SHA512)])
    image, results = alter(image, deletions=[NS(name="alice", mechanism=SHA512)])
    assert results == {"alice": E.NONE}
    assert sorted(image.scram_credentials) == [("alice", SHA256)]
