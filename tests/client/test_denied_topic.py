"""A topic the principal may not describe: the producer's send and partitions_for fail as
soon as the metadata says TOPIC_AUTHORIZATION_FAILED, as the Java producer's do, instead of
waiting max_block_ms for partitions that will not come. The broker runs in process with the
StandardAuthorizer, on virtual time, so "at once" is measured on the run's clock."""

from __future__ import annotations

import pytest
import trio

from client import AdminClient, Producer, errors
from client.admin import AclBinding, AclBindingFilter
from tests.inproc import in_process_broker

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC, LITERAL, DESCRIBE, DENY = 2, 3, 8, 2
PROMPT_S = 2.0


async def test_a_denied_topic_fails_the_send_at_once_and_a_later_grant_is_seen(
        tmp_path, autojump_clock):
    overrides = {"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true"}
    deny = AclBinding(TOPIC, "secret", LITERAL, "User:ANONYMOUS", "*", DESCRIBE, DENY)
    async with in_process_broker(tmp_path / "data", **overrides) as inproc:
        async with AdminClient(bootstrap_servers=inproc.bootstrap) as admin:
            await admin.create_acls([deny])
            async with Producer(bootstrap_servers=inproc.bootstrap) as producer:
                started = trio.current_time()
                handles = [await producer.send("secret", b"%d" % i) for i in range(3)]
                for handle in handles:
                    with pytest.raises(errors.TopicAuthorizationFailedError, match="secret"):
                        await handle
                assert trio.current_time() - started < PROMPT_S
                started = trio.current_time()
                with pytest.raises(errors.TopicAuthorizationFailedError):
                    await producer.partitions_for("secret")
                assert trio.current_time() - started < PROMPT_S
                # another topic is not held up by it
                assert (await producer.send_and_wait("open", b"v")).offset == 0

                # once allowed, the refusal the cache still holds does not fail a new send
                await admin.delete_acls([AclBindingFilter(
                    resource_type=TOPIC, resource_name="secret", pattern_type=LITERAL)])
                assert (await producer.send_and_wait("secret", b"granted")).offset == 0
