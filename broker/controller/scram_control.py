"""The controller's SCRAM credentials: AlterUserScramCredentials becomes
UserScramCredentialRecords and RemoveUserScramCredentialRecords (Kafka's
ScramControlManager, KIP-554).

Owns `alter_user_scram_credentials`, a pure function of the image and the request body that
returns the records to append and the response. The client sends each upsertion's salt and
salted password; the stored and server keys derived from them are what the record keeps,
never the password. Each alteration is checked in Kafka's order and words, and a user is
altered whole or not at all: one refused alteration leaves every alteration of that user
unwritten, and the user's answer is that refusal.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.controller.controller_result import Record, error
from broker.controller.image import MetadataImage
from protocol.errors import ErrorCode
from protocol.metadata_records import MetadataRecordType as T
from protocol.sasl import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_BY_ID, scram_secret


def alter_user_scram_credentials(image: MetadataImage,
                                 body: Any) -> tuple[list[Record], dict]:
    alterations = ([("delete", d) for d in body.deletions]
                   + [("upsert", u) for u in body.upsertions])
    seen = Counter((a.name, a.mechanism) for _, a in alterations)
    errors: dict[str, dict] = {}
    for kind, a in alterations:
        if a.name in errors:
            continue
        refusal = _alteration_error(image, kind, a, seen[(a.name, a.mechanism)])
        if refusal is not None:
            errors[a.name] = refusal
    users = list(dict.fromkeys(a.name for _, a in alterations))
    records: list[Record] = []
    for kind, a in alterations:
        if a.name in errors:
            continue
        if kind == "delete":
            records.append((int(T.REMOVE_USER_SCRAM_CREDENTIAL_RECORD), 0,
                            {"name": a.name, "mechanism": a.mechanism}))
            continue
        salt = bytes(a.salt)
        secret = scram_secret(SCRAM_BY_ID[a.mechanism], bytes(a.salted_password), salt,
                              a.iterations)
        records.append((int(T.USER_SCRAM_CREDENTIAL_RECORD), 0, {
            "name": a.name, "mechanism": a.mechanism, "salt": salt,
            "stored_key": secret.stored_key, "server_key": secret.server_key,
            "iterations": a.iterations}))
    results = [{"user": user, **errors.get(user, error(ErrorCode.NONE))} for user in users]
    return records, {"throttle_time_ms": 0, "results": results}


def _alteration_error(image: MetadataImage, kind: str, a: Any, times: int) -> dict | None:
    """Kafka's checks of one alteration, in its order and words."""
    if not a.name:
        return error(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if times > 1:
        return error(ErrorCode.DUPLICATE_RESOURCE,
                     "A user credential cannot be altered twice in the same request")
    if a.mechanism not in SCRAM_BY_ID:
        return error(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    if kind == "delete":
        if (a.name, a.mechanism) not in image.scram_credentials:
            return error(ErrorCode.RESOURCE_NOT_FOUND,
                         "Attempt to delete a user credential that does not exist")
        return None
    if a.iterations < MIN_ITERATIONS:
        return error(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    if a.iterations > MAX_ITERATIONS:
        return error(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    if not a.salt or not a.salted_password:
        return error(ErrorCode.UNACCEPTABLE_CREDENTIAL,
                     "The salt and the salted password must not be empty")
    return None
