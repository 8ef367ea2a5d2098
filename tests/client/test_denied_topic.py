"""A topic the principal may not describe: the producer's send and partitions_for fail as
soon as the metadata says TOPIC_AUTHORIZATION_FAILED, as the Java producer's do, instead of
waiting max_block_ms for partitions that will not come; a consumer subscribed to it or
assigned it raises from getmany, as the Java consumer's poll. The broker runs in process
with the StandardAuthorizer, on virtual time, so "at once" is measured on the run's
clock."""

from __future__ import annotations

import pytest
import trio

from client import AdminClient, Consumer, Producer, TopicPartition, errors
from client.admin import AclBinding, AclBindingFilter
from tests.inproc import in_process_broker

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC, LITERAL, ALL, DESCRIBE, DENY = 2, 3, 2, 8, 2
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


async def test_a_consumer_of_a_denied_topic_raises_from_getmany(tmp_path, autojump_clock):
    overrides = {"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true"}
    async with in_process_broker(tmp_path / "data", **overrides) as inproc:
        async with AdminClient(bootstrap_servers=inproc.bootstrap) as admin:
            await admin.create_topics({"secret": 1, "open": 1})
            await admin.create_acls([AclBinding(TOPIC, "secret", LITERAL, "User:ANONYMOUS",
                                                "*", ALL, DENY)])
        async with Producer(bootstrap_servers=inproc.bootstrap) as producer:
            await producer.send_and_wait("open", b"readable")

        # subscribed: the refusal is raised, and the rest of the subscription is consumed
        async with Consumer("secret", "open", bootstrap_servers=inproc.bootstrap,
                            group_id="g", auto_offset_reset="earliest") as consumer:
            started = trio.current_time()
            with pytest.raises(errors.TopicAuthorizationFailedError, match="secret"):
                await consumer.getmany(timeout_ms=10_000)
            assert trio.current_time() - started < PROMPT_S
            # the consumer goes on with the rest (the refusal comes again with each new
            # metadata answer, as from Java's poll)
            records: list = []
            with trio.fail_after(30):
                while not records:
                    try:
                        batches = await consumer.getmany(timeout_ms=1000)
                    except errors.TopicAuthorizationFailedError:
                        continue
                    for batch in batches.values():
                        records.extend(r.value for r in batch)
            assert records == [b"readable"]

        # assigned: the group's committed offset is refused
        async with Consumer(bootstrap_servers=inproc.bootstrap, group_id="g2") as consumer:
            consumer.assign([TopicPartition("secret", 0)])
            started = trio.current_time()
            with pytest.raises(errors.TopicAuthorizationFailedError, match="secret"):
                await consumer.getmany(timeout_ms=10_000)
            assert trio.current_time() - started < PROMPT_S
