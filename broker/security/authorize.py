"""The authorization glue handlers call: one question about the request's principal and host
against the ACLs of this broker's metadata image.

Owns: `authorizer_for` (the StandardAuthorizer authorizer.class.name asks for, or None),
`authorize` and its shorthands (`authorize_cluster`, `authorize_topic`, `authorize_group`),
`unauthorized` (the names of a request the principal may not act on, checked once per name),
`authorize_any_topic`, and `enabled`. With no authorizer configured every question is
answered yes, as before ACLs existed.

Denials are logged at INFO on `minibroker.authorizer` (Kafka's kafka.authorizer.logger), with
the principal, host, operation, resource and API; a check made only to filter a listing
(Metadata of all topics, ListGroups) logs nothing, as Kafka's logIfDenied=false. A client
that retries a refused request is refused again each time, so a broker process sends these
lines to a file of their own (`route_denials`: DIR/authorizer.log, rotated by size), as
Kafka's log4j configuration sends its authorizer logger to kafka-authorizer.log, and the
main log is not flooded.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
from collections.abc import Iterable
from typing import Any, Protocol

from broker.config import BrokerConfig, ConfigError
from broker.security.acls import (
    CLUSTER_NAME, AclOperation, ResourceType, StandardAuthorizer, parse_super_users,
)



class RequestContext(Protocol):
    """What is read of broker.handlers.context.RequestContext (named structurally: the
    broker module imports this one, and the context imports the broker)."""

    @property
    def broker(self) -> Any: ...
    @property
    def request(self) -> Any: ...
    @property
    def principal(self) -> str: ...
    @property
    def client_host(self) -> str: ...

log = logging.getLogger("minibroker.authorizer")

DENIALS_FILE = "authorizer.log"
DENIALS_MAX_BYTES = 10 * 1024 * 1024
DENIALS_BACKUPS = 4  # authorizer.log.1 .. .4: at most 50 MiB of denials are kept

STANDARD_AUTHORIZERS = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",  # ZooKeeper's; the same ACL semantics
})


def authorizer_for(config: BrokerConfig) -> StandardAuthorizer | None:
    """The authorizer authorizer.class.name configures; None when it is empty. Any other
    class is refused (ConfigError), as a Kafka broker would fail to load it."""
    name = config.authorizer_class_name.strip()
    if not name:
        return None
    if name not in STANDARD_AUTHORIZERS:
        raise ConfigError(f"invalid value {name!r} for authorizer.class.name: empty, or one "
                          f"of {', '.join(sorted(STANDARD_AUTHORIZERS))}")
    return StandardAuthorizer(parse_super_users(config.super_users),
                              config.allow_everyone_if_no_acl_found)


def route_denials(data_dir: str, fmt: str) -> str:
    """Send the authorizer's lines to DATA_DIR/authorizer.log (rotated at 10 MiB, four old
    files kept) and no longer to the main log; returns the file's path. The broker process
    calls it once, when an authorizer is configured."""
    path = os.path.join(data_dir, DENIALS_FILE)
    handler = logging.handlers.RotatingFileHandler(
        path, maxBytes=DENIALS_MAX_BYTES, backupCount=DENIALS_BACKUPS, encoding="utf-8")
    handler.setFormatter(logging.Formatter(fmt))
    log.addHandler(handler)
    log.setLevel(logging.INFO)  # denials are recorded whatever the main log's level
    log.propagate = False
    return path


def enabled(ctx: RequestContext) -> bool:
    return ctx.broker.authorizer is not None


def authorize(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
              name: str, *, log_denied: bool = True) -> bool:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    allowed = authorizer.authorize(ctx.broker.metadata_cache.image.acls, ctx.principal,
                                   ctx.client_host, operation, resource_type, name)
    if not allowed and log_denied:
        _log_denied(ctx, operation, resource_type, name)
    return allowed


def _log_denied(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                name: str) -> None:
    if log.isEnabledFor(logging.INFO):
        from protocol.messages import ALL_APIS
        api = ALL_APIS.get(ctx.request.api_key)
        log.info("Principal = %s is Denied operation = %s from host = %s on resource = "
                 "%s:%s for request = %s", ctx.principal, operation.name, ctx.client_host,
                 resource_type.name, name, api.name if api else ctx.request.api_key)


def authorize_cluster(ctx: RequestContext, operation: AclOperation, *,
                      log_denied: bool = True) -> bool:
    """The check every cluster-level API makes (CreateAcls: ALTER, DescribeAcls: DESCRIBE,
    AlterUserScramCredentials: ALTER, DescribeUserScramCredentials: DESCRIBE, ...)."""
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)


def authorize_topic(ctx: RequestContext, operation: AclOperation, name: str) -> bool:
    return authorize(ctx, operation, ResourceType.TOPIC, name)


def authorize_group(ctx: RequestContext, operation: AclOperation, group_id: str) -> bool:
    return authorize(ctx, operation, ResourceType.GROUP, group_id)


def unauthorized(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                 names: Iterable[str], *, log_denied: bool = True) -> frozenset[str]:
    """The names the principal may not `operation`, each asked once (a request may repeat a
    topic for each of its partitions)."""
    if ctx.broker.authorizer is None:
        return frozenset()
    return frozenset(name for name in dict.fromkeys(names)
                     if not authorize(ctx, operation, resource_type, name,
                                      log_denied=log_denied))


def authorize_any_topic(ctx: RequestContext, operation: AclOperation) -> bool:
    """May the principal `operation` some topic (InitProducerId without a transactional id:
    IDEMPOTENT_WRITE on the cluster, or WRITE on any topic)?"""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(
        ctx.broker.metadata_cache.image.acls, ctx.principal, ctx.client_host, operation,
        ResourceType.TOPIC)
