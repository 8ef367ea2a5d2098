"""ACLs: the model, how a binding matches a resource and a request, the index the authorizer
looks bindings up in, and Kafka's StandardAuthorizer decision on top of it.

Owns: Kafka's enums (`ResourceType`, `PatternType`, `AclOperation`, `AclPermissionType`, with
Kafka's numbers), `validate_binding` (what CreateAcls refuses), `AclBindingFilter` (what
DescribeAcls and DeleteAcls select with, Kafka's AclBindingFilter.matches), `AclIndex`
(bindings by resource type, pattern and principal), `scan` (the same decision by reading every
binding: the reference the index is tested and benchmarked against) and `StandardAuthorizer`.
Pure: no I/O, no clock, no logging; broker.security.authorize is the glue handlers call.

The decision for (principal, host, operation, resource), as StandardAuthorizerData.findAclRule:
a super user is allowed everything. Otherwise the bindings whose pattern matches the resource
are those of its resource type that are LITERAL with its exact name, LITERAL with the wildcard
name `*`, or PREFIXED with a prefix of its name. Of those, a binding applies when its principal
is the caller's or `User:*`, its host is the caller's address or `*`, and its operation is the
one asked, or ALL, or (ALLOW bindings only) one that implies it: READ, WRITE, DELETE and ALTER
imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS. A DENY that applies wins; else an
ALLOW that applies allows; else, when some binding matched the resource but none applied, the
answer is DENIED; and when no binding matched the resource at all, it is
allow.everyone.if.no.acl.found.

The index. Per resource type: LITERAL bindings by name (the `*` wildcard is one such name),
PREFIXED bindings by their prefix, and the set of prefix lengths in use; under each pattern the
bindings by principal. A lookup is one dict probe for the literal name, one for `*`, and one
per prefix length in use that fits the name (at most len(name), typically a handful), then
reads only the caller's and `User:*`'s bindings there. The index is built from the image's
ACL mapping and cached by the mapping's identity: a metadata image replaces its `acls`
mapping only when an ACL record is replayed, so every request between two ACL changes reuses
one index.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker.controller.image import AclBinding


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"  # a LITERAL resource name matching every name, and the any-host host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one name a CLUSTER resource has

_ALL = AclOperation.ALL
_ALLOW, _DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
_LITERAL, _PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
# what an ALLOW binding for an operation also allows (only ALLOW: DENY READ denies no DESCRIBE)
_IMPLIED_BY: dict[int, frozenset[int]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ,
                                      AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS,
                                              AclOperation.ALTER_CONFIGS}),
}


def _names(enum_type: type[enum.IntEnum], value: int) -> str:
    try:
        return enum_type(value).name
    except ValueError:
        return str(value)


def describe_binding(b: AclBinding) -> str:
    """A binding as kafka-acls prints one, for logs and the acls tool."""
    return (f"(resourceType={_names(ResourceType, b.resource_type)}, name={b.resource_name}, "
            f"patternType={_names(PatternType, b.pattern_type)}, principal={b.principal}, "
            f"host={b.host}, operation={_names(AclOperation, b.operation)}, "
            f"permissionType={_names(AclPermissionType, b.permission_type)})")


# -- validation (CreateAcls) ---------------------------------------------------------------------

def validate_binding(b: AclBinding) -> str | None:
    """Why CreateAcls refuses a binding (INVALID_REQUEST), or None: the checks of Kafka's
    AclControlManager.validateNewAcl and AclApis. Concrete values only: no UNKNOWN, ANY or
    MATCH, a principal of the form Type:name, a non-empty name, kafka-cluster for CLUSTER."""
    if b.resource_type not in ResourceType.__members__.values() or b.resource_type in (
            ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {b.resource_type}"
    if b.pattern_type not in (_LITERAL, _PREFIXED):
        return f"Invalid patternType {b.pattern_type}"
    if b.operation not in AclOperation.__members__.values() or b.operation in (
            AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {b.operation}"
    if b.permission_type not in (_ALLOW, _DENY):
        return f"Invalid permissionType {b.permission_type}"
    if not b.resource_name:
        return "Resource name should not be empty"
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, sep, name = b.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{b.principal}` (no colon is present " \
               "separating the principal type from the principal name)"
    if not b.host:
        return "Invalid empty host"
    return None


# -- filters (DescribeAcls, DeleteAcls) ----------------------------------------------------------

@dataclass(frozen=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None for a field matches anything, as do ANY for the enums;
    a MATCH pattern type selects the bindings that would apply to the named resource."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    def unknown_reason(self) -> str | None:
        """Why the filter can match nothing meaningful (INVALID_REQUEST), or None."""
        for value, enum_type in ((self.resource_type, ResourceType),
                                 (self.pattern_type, PatternType),
                                 (self.operation, AclOperation),
                                 (self.permission_type, AclPermissionType)):
            if value not in enum_type.__members__.values() or value == 0:
                return f"Unknown {enum_type.__name__} {value} in the filter."
        return None

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) \
                and self.pattern_type != b.pattern_type:
            return False
        if self.resource_name is not None:
            if self.pattern_type in (PatternType.ANY, b.pattern_type):
                if self.resource_name != b.resource_name:
                    return False
            elif b.pattern_type == _LITERAL:  # MATCH
                if b.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif b.pattern_type == _PREFIXED:
                if not self.resource_name.startswith(b.resource_name):
                    return False
            else:
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        return self.permission_type in (AclPermissionType.ANY, b.permission_type)


# -- the decision --------------------------------------------------------------------------------

def _applies(b: AclBinding, host: str, operation: int) -> AclPermissionType | None:
    """A binding whose pattern and principal match: its verdict on (host, operation), or
    None when it says nothing about them (Kafka's findResult, past the principal check)."""
    if b.host != WILDCARD and b.host != host:
        return None
    if b.operation != _ALL:
        if b.permission_type == _ALLOW:
            implied = _IMPLIED_BY.get(operation)
            if implied is None:
                if b.operation != operation:
                    return None
            elif b.operation not in implied:
                return None
        elif b.operation != operation:
            return None
    if b.permission_type == _ALLOW:
        return _ALLOW
    return _DENY if b.permission_type == _DENY else None


def pattern_matches(b: AclBinding, resource_type: int, name: str) -> bool:
    if b.resource_type != resource_type:
        return False
    if b.pattern_type == _LITERAL:
        return b.resource_name == name or b.resource_name == WILDCARD
    return b.pattern_type == _PREFIXED and name.startswith(b.resource_name)


def scan(bindings: Iterable[AclBinding], principal: str, host: str, operation: int,
         resource_type: int, name: str) -> AclPermissionType | None:
    """The decision by reading every binding: ALLOW, DENY, or None when no binding matches
    the resource (the caller applies allow.everyone.if.no.acl.found)."""
    principals = (principal, WILDCARD_PRINCIPAL)
    matched = allowed = False
    for b in bindings:
        if not pattern_matches(b, resource_type, name):
            continue
        matched = True
        if b.principal not in principals:
            continue
        verdict = _applies(b, host, operation)
        if verdict == _DENY:
            return _DENY
        allowed |= verdict == _ALLOW
    if allowed:
        return _ALLOW
    return _DENY if matched else None


_ByPrincipal = dict[str, list[AclBinding]]


class _TypeIndex:
    __slots__ = ("literal", "prefixed", "prefix_lengths", "bindings")

    def __init__(self) -> None:
        self.literal: dict[str, _ByPrincipal] = {}
        self.prefixed: dict[str, _ByPrincipal] = {}
        self.prefix_lengths: tuple[int, ...] = ()
        self.bindings: list[AclBinding] = []


class AclIndex:
    """The bindings of one image, indexed for `find` (see the module docstring)."""

    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        self._types: dict[int, _TypeIndex] = {}
        lengths: dict[int, set[int]] = {}
        for b in bindings:
            t = self._types.get(b.resource_type)
            if t is None:
                t = self._types[b.resource_type] = _TypeIndex()
            t.bindings.append(b)
            if b.pattern_type == _LITERAL:
                by_name = t.literal
            elif b.pattern_type == _PREFIXED:
                by_name = t.prefixed
                lengths.setdefault(b.resource_type, set()).add(len(b.resource_name))
            else:
                continue  # not a pattern a binding can have: it matches nothing
            by_name.setdefault(b.resource_name, {}).setdefault(b.principal, []).append(b)
        for resource_type, used in lengths.items():
            self._types[resource_type].prefix_lengths = tuple(sorted(used))

    def find(self, principal: str, host: str, operation: int, resource_type: int,
             name: str) -> AclPermissionType | None:
        """What `scan` answers, by lookups."""
        t = self._types.get(resource_type)
        if t is None:
            return None
        patterns: list[_ByPrincipal] = []
        found = t.literal.get(name)
        if found is not None:
            patterns.append(found)
        if name != WILDCARD:
            found = t.literal.get(WILDCARD)
            if found is not None:
                patterns.append(found)
        if t.prefix_lengths:
            size = len(name)
            for length in t.prefix_lengths:
                if length > size:
                    break
                found = t.prefixed.get(name[:length])
                if found is not None:
                    patterns.append(found)
        if not patterns:
            return None
        allowed = False
        for by_principal in patterns:
            for who in (principal, WILDCARD_PRINCIPAL):
                for b in by_principal.get(who, ()):
                    verdict = _applies(b, host, operation)
                    if verdict == _DENY:
                        return _DENY
                    allowed |= verdict == _ALLOW
        return _ALLOW if allowed else _DENY

    def of_type(self, resource_type: int) -> list[AclBinding]:
        t = self._types.get(resource_type)
        return t.bindings if t is not None else []


def parse_super_users(value: str) -> frozenset[str]:
    """super.users: principals separated by semicolons."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


class StandardAuthorizer:
    """Kafka's StandardAuthorizer over the ACLs of a metadata image: super users,
    allow.everyone.if.no.acl.found, and the index of the last ACL mapping it was asked
    about (rebuilt only when the mapping object changes)."""

    def __init__(self, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: Mapping[uuid.UUID, AclBinding] | None = None
        self._index = AclIndex(())

    def index(self, acls: Mapping[uuid.UUID, AclBinding]) -> AclIndex:
        if acls is not self._acls:
            # holding the mapping keeps its identity from being reused by another object
            self._index = AclIndex(acls.values())
            self._acls = acls
        return self._index

    def authorize(self, acls: Mapping[uuid.UUID, AclBinding], principal: str, host: str,
                  operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        verdict = self.index(acls).find(principal, host, operation, resource_type, name)
        if verdict is None:
            return self.allow_everyone_if_no_acl_found
        return verdict == _ALLOW

    def authorize_by_resource_type(self, acls: Mapping[uuid.UUID, AclBinding], principal: str,
                                   host: str, operation: int, resource_type: int) -> bool:
        """May the principal do `operation` on SOME resource of the type (Kafka's
        Authorizer.authorizeByResourceType: InitProducerId's WRITE on any topic)? Allowed
        when a resource no ACL names would be, or when an ALLOW binding for the operation (or
        ALL) names resources that no DENY binding for it covers whole. It reads every binding
        of the type, as Kafka's does; only InitProducerId asks, once per producer."""
        if self.authorize(acls, principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[int, str]] = []
        for b in self.index(acls).of_type(resource_type):
            if b.principal not in (principal, WILDCARD_PRINCIPAL) \
                    or b.host not in (host, WILDCARD) or b.operation not in (operation, _ALL):
                continue
            if b.permission_type == _DENY:
                if b.pattern_type == _LITERAL:
                    if b.resource_name == WILDCARD:
                        return False
                    deny_literal.add(b.resource_name)
                elif b.pattern_type == _PREFIXED:
                    deny_prefixed.add(b.resource_name)
            elif b.permission_type == _ALLOW and b.pattern_type in (_LITERAL, _PREFIXED):
                if b.pattern_type == _LITERAL and b.resource_name == WILDCARD:
                    return True
                allow.append((b.pattern_type, b.resource_name))
        for pattern_type, name in allow:
            if pattern_type == _LITERAL and name in deny_literal:
                continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False
