"""The controller's CreateAcls and DeleteAcls: the records they write, replayed into the
image, with Kafka's validation and AclBindingFilter matching."""

from __future__ import annotations

import itertools
import uuid
from types import SimpleNamespace as NS

from broker.controller.acl_control import create_acls, delete_acls
from broker.controller.image import MetadataImage
from protocol.errors import ErrorCode as E
from protocol.metadata_records import decode_metadata_record, encode_metadata_record

TOPIC, GROUP, LITERAL, PREFIXED, MATCH, ANY = 2, 3, 3, 4, 2, 1
READ, WRITE, ALLOW = 3, 4, 3


def creation(name: str, pattern: int = LITERAL, op: int = READ, rtype: int = TOPIC,
             principal: str = "User:alice") -> NS:
    return NS(resource_type=rtype, resource_name=name, resource_pattern_type=pattern,
              principal=principal, host="*", operation=op, permission_type=ALLOW)


def apply(image: MetadataImage, records: list) -> MetadataImage:
    return image.replay(decode_metadata_record(encode_metadata_record(*r)) for r in records)


def ids():
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def test_create_writes_one_record_per_new_binding_and_validates_each():
    new_id = ids()
    body = NS(creations=[creation("orders"), creation("orders"), creation("", LITERAL),
                         creation("pay", PREFIXED), creation("x", MATCH)])
    records, response = create_acls(MetadataImage.EMPTY, body, new_id)
    assert [r["error_code"] for r in response["results"]] == [
        E.NONE, E.NONE, E.INVALID_REQUEST, E.NONE, E.INVALID_REQUEST]
    image = apply(MetadataImage.EMPTY, records)
    assert sorted(b.resource_name for b in image.acls.values()) == ["orders", "pay"]
    # an existing binding is not written again
    again, response = create_acls(image, NS(creations=[creation("orders")]), new_id)
    assert again == [] and response["results"][0]["error_code"] == E.NONE


def test_delete_removes_what_each_filter_matches_once():
    body = NS(creations=[creation("orders"), creation("ord", PREFIXED), creation("*"),
                         creation("orders", rtype=GROUP), creation("other", op=WRITE)])
    records, _ = create_acls(MetadataImage.EMPTY, body, ids())
    image = apply(MetadataImage.EMPTY, records)

    def flt(name, pattern, rtype=TOPIC, op=ANY):
        return NS(resource_type_filter=rtype, resource_name_filter=name,
                  pattern_type_filter=pattern, principal_filter=None, host_filter=None,
                  operation=op, permission_type=ANY)

    records, response = delete_acls(image, NS(filters=[
        flt("orders", MATCH), flt("orders", LITERAL), flt(None, ANY, rtype=0)]))
    matched = [sorted(a["resource_name"] for a in r["matching_acls"])
               for r in response["filter_results"]]
    assert matched[:2] == [["*", "ord", "orders"], ["orders"]]
    assert response["filter_results"][2]["error_code"] == E.INVALID_REQUEST
    assert len(records) == 3  # orders is matched twice, removed once
    left = apply(image, records)
    assert sorted((b.resource_type, b.resource_name) for b in left.acls.values()) == [
        (TOPIC, "other"), (GROUP, "orders")]
