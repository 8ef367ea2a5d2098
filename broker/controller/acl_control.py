"""The controller's ACL operations: CreateAcls and DeleteAcls become AccessControlEntryRecords
and RemoveAccessControlEntryRecords (Kafka's AclControlManager).

Owns: `create_acls` and `delete_acls`, pure functions of the image and the request body that
return the records to append and the response. Each creation is validated on its own
(broker.security.acls.validate_binding: INVALID_REQUEST with Kafka's message) and gets a
fresh random id; a binding the image (or an earlier creation of the same request) already
holds succeeds without a second record, as Kafka keeps one entry per distinct binding. A
DeleteAcls filter removes every binding it matches (AclBindingFilter semantics, MATCH
included) and answers with them; a binding two filters match is removed once, reported by
both. A filter with an UNKNOWN component is INVALID_REQUEST and removes nothing.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

from broker.controller.image import AclBinding, MetadataImage
from broker.security.acls import AclBindingFilter, validate_binding
from protocol.errors import ErrorCode
from protocol.metadata_records import MetadataRecordType as T

Record = tuple[int, int, dict]


def _get(item: Any, name: str, default: Any) -> Any:
    try:
        return item.get(name, default)
    except AttributeError:
        return getattr(item, name, default)


def create_acls(image: MetadataImage, body: Any,
                new_id: Callable[[], uuid.UUID]) -> tuple[list[Record], dict]:
    existing = set(image.acls.values())
    records: list[Record] = []
    results = []
    for c in body.creations:
        binding = AclBinding(c.resource_type, c.resource_name,
                             _get(c, "resource_pattern_type", 3), c.principal, c.host,
                             c.operation, c.permission_type)
        reason = validate_binding(binding)
        if reason is not None:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": reason})
            continue
        if binding not in existing:
            existing.add(binding)
            acl_id = new_id()
            while acl_id in image.acls:
                acl_id = new_id()
            records.append((T.ACCESS_CONTROL_ENTRY_RECORD, 0, {
                "id": acl_id, "resource_type": binding.resource_type,
                "resource_name": binding.resource_name, "pattern_type": binding.pattern_type,
                "principal": binding.principal, "host": binding.host,
                "operation": binding.operation, "permission_type": binding.permission_type}))
        results.append({"error_code": ErrorCode.NONE, "error_message": None})
    return records, {"throttle_time_ms": 0, "results": results}


def binding_filter(f: Any) -> AclBindingFilter:
    """A DescribeAcls body or a DeleteAcls filter as an AclBindingFilter."""
    return AclBindingFilter(f.resource_type_filter, f.resource_name_filter,
                            _get(f, "pattern_type_filter", 3), f.principal_filter,
                            f.host_filter, f.operation, f.permission_type)


def matching_acl(b: AclBinding, code: ErrorCode = ErrorCode.NONE) -> dict:
    return {"error_code": code, "error_message": None, "resource_type": b.resource_type,
            "resource_name": b.resource_name, "pattern_type": b.pattern_type,
            "principal": b.principal, "host": b.host, "operation": b.operation,
            "permission_type": b.permission_type}


def delete_acls(image: MetadataImage, body: Any) -> tuple[list[Record], dict]:
    removed: set[uuid.UUID] = set()
    records: list[Record] = []
    results = []
    for f in body.filters:
        acl_filter = binding_filter(f)
        reason = acl_filter.unknown_reason()
        if reason is not None:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": reason,
                            "matching_acls": []})
            continue
        matched = []
        for acl_id, binding in image.acls.items():
            if acl_filter.matches(binding):
                matched.append(matching_acl(binding))
                if acl_id not in removed:
                    removed.add(acl_id)
                    records.append((T.REMOVE_ACCESS_CONTROL_ENTRY_RECORD, 0, {"id": acl_id}))
        results.append({"error_code": ErrorCode.NONE, "error_message": None,
                        "matching_acls": matched})
    return records, {"throttle_time_ms": 0, "filter_results": results}
