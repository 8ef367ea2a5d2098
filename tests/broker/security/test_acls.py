"""The authorizer's decision (StandardAuthorizer semantics), the filters of DescribeAcls and
DeleteAcls, CreateAcls validation, and the index against a scan of every binding."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.controller.image import AclBinding
from broker.security.acls import (
    AclBindingFilter, AclIndex, AclOperation as Op, AclPermissionType as Perm,
    PatternType as Pat, ResourceType as Res, StandardAuthorizer, scan, validate_binding,
)

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(name: str, op: Op = Op.READ, *, principal: str = ALICE, perm: Perm = Perm.ALLOW,
        pattern: Pat = Pat.LITERAL, host: str = "*", rtype: Res = Res.TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def acls(*bindings: AclBinding) -> dict:
    return {uuid.UUID(int=i + 1): b for i, b in enumerate(bindings)}


def allowed(bindings: dict, op: Op, name: str, *, principal: str = ALICE,
            host: str = HOST, rtype: Res = Res.TOPIC, authorizer=None) -> bool:
    authorizer = authorizer or StandardAuthorizer()
    return authorizer.authorize(bindings, principal, host, op, rtype, name)


def test_a_literal_acl_allows_its_principal_its_operation_on_its_resource_only():
    image = acls(acl("orders", Op.WRITE))
    assert allowed(image, Op.WRITE, "orders")
    assert not allowed(image, Op.READ, "orders")
    assert not allowed(image, Op.WRITE, "orders", principal=BOB)
    assert not allowed(image, Op.WRITE, "orders2")
    assert not allowed(image, Op.WRITE, "orders", rtype=Res.GROUP)


def test_a_prefixed_acl_grants_exactly_its_prefix():
    image = acls(acl("pay", Op.READ, pattern=Pat.PREFIXED))
    assert allowed(image, Op.READ, "pay")
    assert allowed(image, Op.READ, "payments")
    assert not allowed(image, Op.READ, "pa")
    assert not allowed(image, Op.READ, "xpayments")


def test_the_wildcard_name_and_principal_match_everything():
    image = acls(acl("*", Op.READ, principal="User:*"))
    assert allowed(image, Op.READ, "anything", principal=BOB)
    assert not allowed(image, Op.WRITE, "anything", principal=BOB)


def test_deny_beats_allow_whichever_pattern_carries_it():
    image = acls(acl("*", Op.ALL), acl("secret", Op.READ, pattern=Pat.PREFIXED,
                                        perm=Perm.DENY))
    assert allowed(image, Op.READ, "public")
    assert not allowed(image, Op.READ, "secrets")
    assert allowed(image, Op.WRITE, "secrets")  # the DENY names READ only


def test_implied_operations_are_implied_by_allow_only():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed(acls(acl("t", op)), Op.DESCRIBE, "t")
    assert not allowed(acls(acl("t", Op.CREATE)), Op.DESCRIBE, "t")
    assert allowed(acls(acl("t", Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS, "t")
    assert not allowed(acls(acl("t", Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS, "t")
    # a DENY READ does not deny DESCRIBE; a DENY ALL denies everything
    image = acls(acl("t", Op.DESCRIBE), acl("t", Op.READ, perm=Perm.DENY))
    assert allowed(image, Op.DESCRIBE, "t") and not allowed(image, Op.READ, "t")
    assert not allowed(acls(acl("t", Op.DESCRIBE), acl("t", Op.ALL, perm=Perm.DENY)),
                       Op.DESCRIBE, "t")


def test_host_is_the_wildcard_or_the_exact_address():
    image = acls(acl("t", host=HOST))
    assert allowed(image, Op.READ, "t", host=HOST)
    assert not allowed(image, Op.READ, "t", host="10.0.0.2")


def test_super_users_and_allow_everyone_if_no_acl_found():
    image = acls(acl("guarded", Op.READ, principal=BOB))
    strict = StandardAuthorizer()
    lenient = StandardAuthorizer(allow_everyone_if_no_acl_found=True)
    root = StandardAuthorizer(super_users={"User:root"})
    assert not allowed(image, Op.READ, "open", authorizer=strict)
    assert allowed(image, Op.READ, "open", authorizer=lenient)
    # an ACL on the resource, even another principal's, takes the default away
    assert not allowed(image, Op.READ, "guarded", authorizer=lenient)
    assert allowed(image, Op.READ, "guarded", principal="User:root", authorizer=root)


def test_authorize_by_resource_type_finds_an_allow_not_covered_by_a_deny():
    authorizer = StandardAuthorizer()

    def any_topic(*bindings: AclBinding) -> bool:
        return authorizer.authorize_by_resource_type(acls(*bindings), ALICE, HOST, Op.WRITE,
                                                     Res.TOPIC)

    assert not any_topic()
    assert any_topic(acl("orders", Op.WRITE))
    assert not any_topic(acl("orders", Op.WRITE), acl("ord", Op.WRITE, pattern=Pat.PREFIXED,
                                                      perm=Perm.DENY))
    assert not any_topic(acl("orders", Op.WRITE), acl("*", Op.WRITE, perm=Perm.DENY))
    assert any_topic(acl("o", Op.WRITE, pattern=Pat.PREFIXED),
                     acl("orders", Op.WRITE, perm=Perm.DENY))
    assert not any_topic(acl("orders", Op.READ))


def test_the_index_is_cached_by_the_identity_of_the_acl_mapping():
    authorizer = StandardAuthorizer()
    image = acls(acl("t"))
    first = authorizer.index(image)
    assert authorizer.index(image) is first
    assert authorizer.index(dict(image)) is not first


def test_creations_are_validated_as_kafka_does():
    good = acl("t")
    assert validate_binding(good) is None
    for bad in (acl("t", rtype=Res.ANY), acl("t", rtype=Res.UNKNOWN),
                acl("t", pattern=Pat.MATCH), acl("t", pattern=Pat.ANY), acl("t", Op.ANY),
                acl("t", perm=Perm.ANY), acl(""), acl("t", principal="alice"),
                acl("other", Op.ALTER, rtype=Res.CLUSTER), acl("t", rtype=9)):  # type: ignore[arg-type]
        assert validate_binding(bad) is not None, bad
    assert validate_binding(acl("kafka-cluster", Op.ALTER, rtype=Res.CLUSTER)) is None


def test_binding_filters_match_as_kafka_acl_binding_filter():
    literal, prefixed, wildcard = acl("orders"), acl("ord", pattern=Pat.PREFIXED), acl("*")

    def selected(name, pattern, **entry) -> set:
        f = AclBindingFilter(Res.ANY, name, pattern, entry.get("principal"), None,
                             entry.get("op", Op.ANY), Perm.ANY)
        return {b.resource_name for b in (literal, prefixed, wildcard) if f.matches(b)}

    assert selected(None, Pat.ANY) == {"orders", "ord", "*"}
    assert selected("orders", Pat.ANY) == {"orders"}
    assert selected("orders", Pat.MATCH) == {"orders", "ord", "*"}
    assert selected("ord", Pat.PREFIXED) == {"ord"}
    assert selected(None, Pat.LITERAL) == {"orders", "*"}
    assert selected(None, Pat.ANY, principal=BOB) == set()
    assert selected(None, Pat.ANY, op=Op.WRITE) == set()
    assert AclBindingFilter(Res.UNKNOWN, None, Pat.ANY, None, None, Op.ANY,
                            Perm.ANY).unknown_reason() is not None


# -- the index answers exactly as a scan of every binding -----------------------------------------

NAMES = st.text(alphabet="ab*", min_size=1, max_size=4)
PRINCIPALS = st.sampled_from([ALICE, BOB, "User:*"])
HOSTS = st.sampled_from(["*", HOST, "10.0.0.2"])
OPERATIONS = st.sampled_from([o for o in Op if o not in (Op.UNKNOWN, Op.ANY)])
BINDINGS = st.builds(
    AclBinding, st.sampled_from([Res.TOPIC, Res.GROUP]), NAMES,
    st.sampled_from([Pat.LITERAL, Pat.PREFIXED]), PRINCIPALS, HOSTS, OPERATIONS,
    st.sampled_from([Perm.ALLOW, Perm.DENY]))


@settings(max_examples=300, deadline=None)
@given(st.lists(BINDINGS, max_size=30), st.lists(
    st.tuples(st.sampled_from([ALICE, BOB]), st.sampled_from([HOST, "10.0.0.2"]), OPERATIONS,
              st.sampled_from([Res.TOPIC, Res.GROUP]), NAMES), min_size=1, max_size=10))
def test_the_index_answers_exactly_as_a_scan(bindings, questions):
    index = AclIndex(bindings)
    for principal, host, op, rtype, name in questions:
        assert index.find(principal, host, op, rtype, name) == scan(
            bindings, principal, host, op, rtype, name)
