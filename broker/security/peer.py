"""How this node connects to another node's secured listener: the `opener` PeerChannel
takes, with the TLS handshake and the SASL login done before the channel sees the stream.

Owns: `node_opener` (the opener for one listener: the inter-broker listener, which replica
fetchers use, or the controller listener, which Raft and the broker-to-controller channel
use), `sasl_login` (protocol.sasl.SaslLogin's requests sent over a stream), and
`login_credentials`.

The listener's protocol (listener.security.protocol.map) decides: SSL and SASL_SSL wrap
the TCP stream in TLS (trusting ssl.truststore.*, presenting ssl.keystore.* when set, the
host name checked unless ssl.endpoint.identification.algorithm is empty); SASL_PLAINTEXT
and SASL_SSL then log in with sasl.mechanism.inter.broker.protocol (or
sasl.mechanism.controller.protocol) as the `username`/`password` of that listener's JAAS
config, as a Kafka broker does. A refused handshake or login raises ConnectionError, which
PeerChannel counts as a failed connect: it backs off and tries again.
"""

from __future__ import annotations

import ssl
from typing import Awaitable, Callable

import trio

from broker.config import BrokerConfig, ConfigError
from broker.listeners import NodeAddresses
from broker.security.authenticator import jaas_options
from broker.security.tls import client_context
from protocol.connection import NEED_DATA, ClientConnection
from protocol.errors import ErrorCode, ProtocolError
from protocol.sasl import SaslError, SaslLogin, SaslLoginRefused

Opener = Callable[[str, int], Awaitable[trio.abc.Stream]]
RECEIVE_SIZE = 1 << 16


def login_credentials(config: BrokerConfig, listener: str, mechanism: str) -> tuple[str, str]:
    options = jaas_options(config, listener, mechanism) or {}
    if not options.get("username") or "password" not in options:
        raise ConfigError(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas."
                          "config: this node needs username and password to log in to the "
                          f"other nodes' {listener} listener")
    return options["username"], options["password"]


async def sasl_login(stream: trio.abc.Stream, mechanism: str, username: str, password: str,
                     client_id: str) -> None:
    """Authenticate on a SASL listener; ConnectionError when refused."""
    conn = ClientConnection(client_id)

    async def roundtrip(api_key: int, version: int, body: dict):
        _, frame = conn.send_request(api_key, version, body)
        await stream.send_all(frame)
        while (response := conn.next_response()) is NEED_DATA:
            data = await stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise ConnectionError("the peer closed the connection during SASL login")
            conn.receive_data(data)
        return response.body

    login = SaslLogin(mechanism, username, password)
    try:
        while (request := login.request()) is not None:
            login.response(await roundtrip(*request))
    except SaslLoginRefused as e:
        raise ConnectionError(f"SASL {mechanism} login as {username!r} refused: "
                              f"{ErrorCode.of(e.error_code).name}: {e}") from e
    except (SaslError, ProtocolError) as e:
        raise ConnectionError(f"SASL {mechanism} login as {username!r} failed: {e}") from e


def node_opener(config: BrokerConfig, addresses: NodeAddresses, listener: str,
                mechanism_property: str, client_id: str, dial: Opener | None = None
                ) -> Opener | None:
    """The opener for connections to other nodes' `listener`; `dial` (TCP when None) for
    PLAINTEXT, and under TLS and SASL logins otherwise. None for PLAINTEXT over TCP
    (PeerChannel's default)."""
    protocol = addresses.protocol_of(listener)
    if protocol == "PLAINTEXT":
        return dial
    connect: Opener = dial if dial is not None else trio.open_tcp_stream
    context: ssl.SSLContext | None = None
    if protocol in ("SSL", "SASL_SSL"):
        context = client_context(config, listener)
    login: tuple[str, str, str] | None = None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = str(config[mechanism_property]).upper()
        login = (mechanism, *login_credentials(config, listener, mechanism))

    async def open_stream(host: str, port: int) -> trio.abc.Stream:
        stream: trio.abc.Stream = await connect(host, port)
        try:
            if context is not None:
                stream = trio.SSLStream(stream, context, server_hostname=host)
                try:
                    await stream.do_handshake()
                except trio.BrokenResourceError as e:
                    raise ConnectionError(f"TLS handshake with {host}:{port} failed: "
                                          f"{e.__cause__ or e}") from e
            if login is not None:
                try:
                    await sasl_login(stream, *login, client_id)
                except trio.BrokenResourceError as e:
                    raise ConnectionError(f"lost during SASL login: {e.__cause__ or e}") from e
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return stream

    return open_stream
