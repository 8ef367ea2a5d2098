"""The principal a request carries (RequestContext.principal, what ACLs are checked
against): the TLS client certificate's subject, or the SASL user, or User:ANONYMOUS. The
broker runs in process; its Server is handed a TLS or SASL connection over memory streams
and a Metadata handler that records the principal it is called with."""

from __future__ import annotations

import ssl

import trio
import trio.testing

from broker.handlers import HANDLERS
from broker.security.peer import sasl_login
from broker.server import Server
from protocol.connection import NEED_DATA, ClientConnection
from protocol.messages import METADATA
from tests.inproc import in_process_broker
from harness.certs import make_certs
from tests.interop.test_security import PLAIN_JAAS


async def metadata(stream: trio.abc.Stream) -> None:
    conn = ClientConnection("principal-test")
    await stream.send_all(conn.send_request(METADATA, 1, {"topics": None})[1])
    while conn.next_response() is NEED_DATA:
        data = await stream.receive_some(65536)
        assert data, "the broker closed the connection"
        conn.receive_data(data)


async def test_principals_of_tls_sasl_and_plaintext_connections(tmp_path):
    certs = make_certs(tmp_path / "certs")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:19990,MTLS://127.0.0.1:19991,"
                     "SASL://127.0.0.1:19992",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL,SASL:SASL_SSL",
        "ssl.keystore.location": str(certs / "broker.pem"),
        "ssl.truststore.location": str(certs / "ca.pem"),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.sasl.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    async with in_process_broker(tmp_path / "data", **overrides) as inproc:
        seen: list[str] = []

        async def recording(ctx):
            seen.append(ctx.principal)
            return await HANDLERS[METADATA](ctx)

        server = Server(inproc.broker, handlers={**HANDLERS, METADATA: recording})

        def connect(listener: str) -> trio.testing.MemoryStream:
            client_end, server_end = trio.testing.memory_stream_pair()
            inproc.nursery.start_soon(server.handle_connection, server_end,
                                      "127.0.0.1:50000", listener)
            return client_end

        alice = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        alice.load_cert_chain(str(certs / "client.pem"))
        stream = trio.SSLStream(connect("MTLS"), alice, server_hostname="localhost")
        await metadata(stream)

        trusting = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        stream = trio.SSLStream(connect("SASL"), trusting, server_hostname="localhost")
        await sasl_login(stream, "PLAIN", "alice", "alice-secret", "principal-test")
        await metadata(stream)

        await metadata(connect("PLAINTEXT"))
        assert seen == ["User:CN=alice,OU=eng,O=minibroker", "User:alice", "User:ANONYMOUS"]
