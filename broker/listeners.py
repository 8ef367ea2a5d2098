"""Listener and voter addresses: parsing `listeners`, `advertised.listeners` and
`controller.quorum.voters`, and choosing where each kind of traffic goes.

Owns: `Endpoint` (a named HOST:PORT), `parse_listeners`, `parse_voters`, and `NodeAddresses`,
which resolves one node's client listener, its controller listener and what it advertises.

The rules, as Kafka's KafkaConfig applies them:
- `listeners` is `HOST:PORT` (named PLAINTEXT) or `NAME://HOST:PORT,...`.
- A listener named in `controller.listener.names` carries controller traffic only; every
  other listener serves clients (`clients`; the first is `client`), and
  `inter.broker.listener.name` (default: the first) is the one other brokers fetch through.
  Kafka's compose setups use two: one by service name inside the container network, one
  advertised to the host.
- Every listener name maps to a security protocol in `listener.security.protocol.map`:
  PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; each Endpoint carries its own (Kafka's ids in
  `SECURITY_PROTOCOL_IDS` travel in BrokerRegistration). The controller listener's protocol
  is also what a node speaks to reach the other voters.
- A voter with no controller listener in `listeners` listens for controller traffic on its
  own entry in `controller.quorum.voters`.
- With no voters configured the node is its own single voter (a single-node cluster) and
  needs no controller listener: its controller is reached in process.
- `controller.quorum.bootstrap.servers` (KIP-853, `parse_bootstrap_servers`) makes the
  quorum dynamic: `bootstrap` holds those addresses, and `voters` only the initial voters
  (from controller.quorum.voters, as `kafka-storage format --initial-controllers` gives
  them), empty on a node that joins later; such a controller needs a controller listener
  in `listeners`, which is the endpoint AddRaftVoter names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from broker.config import BrokerConfig, ConfigError

DEFAULT_LISTENER = "PLAINTEXT"
# Kafka's SecurityProtocol ids
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def _host_port(text: str, what: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"{what}: expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def parse_listeners(text: str, what: str = "listeners") -> list[Endpoint]:
    out: list[Endpoint] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        if not sep:
            name, address = DEFAULT_LISTENER, item
        host, port = _host_port(address, what)
        if any(e.name == name.upper() for e in out):
            raise ConfigError(f"{what}: listener name {name} appears twice")
        out.append(Endpoint(name.upper(), host, port))
    if not out:
        raise ConfigError(f"{what}: no listener in {text!r}")
    return out


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """`ID@HOST:PORT,...` -> {id: (host, port)}; ConfigError names the bad entry."""
    voters: dict[int, tuple[str, int]] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        node, sep, address = item.partition("@")
        if not sep or not node.strip().isdigit():
            raise ConfigError(f"controller.quorum.voters: expected ID@HOST:PORT, got {item!r}")
        node_id = int(node)
        if node_id in voters:
            raise ConfigError(f"controller.quorum.voters: voter {node_id} appears twice")
        voters[node_id] = _host_port(address, "controller.quorum.voters")
    if not voters:
        raise ConfigError("controller.quorum.voters is empty")
    return voters


def parse_bootstrap_servers(text: str) -> list[tuple[str, int]]:
    """`HOST:PORT,...` (controller.quorum.bootstrap.servers) -> [(host, port)]."""
    out = [_host_port(item, "controller.quorum.bootstrap.servers")
           for item in (x.strip() for x in text.split(",")) if item]
    if not out:
        raise ConfigError("controller.quorum.bootstrap.servers is empty")
    return out


def format_voters(voters: dict[int, tuple[str, int]]) -> str:
    return ",".join(f"{i}@{h}:{p}" for i, (h, p) in sorted(voters.items()))


def parse_protocol_map(protocol_map: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` -> {NAME: PROTOCOL}; ConfigError names an entry that is not."""
    protocols: dict[str, str] = {}
    for item in (x.strip() for x in protocol_map.split(",")):
        name, sep, protocol = item.partition(":")
        if item and (not sep or not name.strip()):
            raise ConfigError(f"listener.security.protocol.map: expected NAME:PROTOCOL, "
                              f"got {item!r}")
        if item:
            protocol = protocol.strip().upper()
            if protocol not in SECURITY_PROTOCOL_IDS:
                raise ConfigError(f"listener.security.protocol.map: unknown security "
                                  f"protocol {protocol} (PLAINTEXT, SSL, SASL_PLAINTEXT or "
                                  "SASL_SSL)")
            protocols[name.strip().upper()] = protocol
    return protocols


def _with_protocols(listeners: list[Endpoint], protocols: dict[str, str]) -> list[Endpoint]:
    """Every listener's name must be in `listener.security.protocol.map`, as KafkaConfig
    requires: a listener meant for TLS must never be served in the clear by default."""
    out = []
    for e in listeners:
        mapped = protocols.get(e.name)
        if mapped is None:
            raise ConfigError(f"listener.security.protocol.map: no protocol for listener {e.name}")
        out.append(replace(e, security_protocol=mapped))
    return out


@dataclass(frozen=True)
class NodeAddresses:
    node_id: int
    is_broker: bool
    is_controller: bool
    client: Endpoint | None  # the first client listener (named in logs and broker_start)
    advertised: tuple[Endpoint, ...]  # what RegisterBroker publishes, client listener first
    inter_broker: str  # the listener name other nodes use to reach this broker
    controller: Endpoint | None  # where this voter serves controller traffic, None in process
    voters: dict[int, tuple[str, int]]  # the quorum; {node_id: ...} alone for a single node
    single_node: bool  # no voters were configured
    clients: tuple[Endpoint, ...] = ()  # every listener that serves clients and brokers
    # listener name -> security protocol, for every name in listener.security.protocol.map
    protocols: dict[str, str] = field(default_factory=dict)
    # the first of controller.listener.names: the listener other voters serve controller
    # traffic on, so its protocol is what this node speaks to them
    controller_listener_name: str = "CONTROLLER"
    # controller.quorum.bootstrap.servers: a dynamic quorum (kraft.version 1) when not empty
    bootstrap: tuple[tuple[str, int], ...] = ()

    @property
    def dynamic(self) -> bool:
        return bool(self.bootstrap)

    def protocol_of(self, listener: str) -> str:
        return self.protocols.get(listener.upper(), "PLAINTEXT")

    @classmethod
    def resolve(cls, config: BrokerConfig) -> NodeAddresses:
        node_id = config.broker_id
        roles = set(config.process_roles)
        controller_names = {n.upper() for n in config.controller_listener_names}
        controller_name = (config.controller_listener_names[0].upper()
                           if config.controller_listener_names else "CONTROLLER")
        protocols = parse_protocol_map(config.listener_security_protocol_map)
        listeners = _with_protocols(parse_listeners(config.listeners), protocols)
        ordinary = [e for e in listeners if e.name not in controller_names]
        own_controller = [e for e in listeners if e.name in controller_names]
        advertised_text = config.advertised_listeners
        advertised = (parse_listeners(advertised_text, "advertised.listeners")
                      if advertised_text else ordinary)
        advertised = [replace(a, security_protocol=protocols.get(a.name, "PLAINTEXT"))
                      for a in advertised if a.name not in controller_names]
        unknown = sorted({a.name for a in advertised} - {e.name for e in ordinary})
        if ordinary and unknown:
            # as KafkaConfig: a client told an address no listener serves could never connect
            raise ConfigError(f"advertised.listeners: {', '.join(unknown)} is not a listener "
                              "in listeners")
        if "broker" in roles and not ordinary:
            raise ConfigError("listeners: a broker needs a listener that is not a controller "
                              f"listener ({', '.join(sorted(controller_names))})")
        inter = (config.inter_broker_listener_name or (ordinary[0].name if ordinary else
                                                       DEFAULT_LISTENER)).upper()
        if ordinary and inter not in {e.name for e in advertised}:
            raise ConfigError(f"inter.broker.listener.name: {inter} is not among the "
                              "advertised listeners")
        voters_text = config.controller_quorum_voters
        bootstrap_text = config.controller_quorum_bootstrap_servers
        if bootstrap_text:
            bootstrap = parse_bootstrap_servers(bootstrap_text)
            voters = parse_voters(voters_text) if voters_text else {}
            own: Endpoint | None = None
            if "controller" in roles:
                if own_controller:
                    own = own_controller[0]
                elif node_id in voters:
                    host, port = voters[node_id]
                    own = Endpoint(controller_name, host, port,
                                   protocols.get(controller_name, "PLAINTEXT"))
                else:
                    raise ConfigError("controller.quorum.bootstrap.servers: a controller that "
                                      "joins the quorum needs a controller listener in "
                                      f"listeners ({controller_name}://HOST:PORT)")
            elif node_id in voters:
                raise ConfigError(f"controller.quorum.voters names this node ({node_id}) but "
                                  "process.roles has no controller role")
            client = ordinary[0] if ordinary else None
            return cls(node_id, "broker" in roles, "controller" in roles, client,
                       tuple(advertised), inter, own, voters, False, tuple(ordinary),
                       protocols, controller_name, tuple(bootstrap))
        if voters_text is None:
            if roles != {"broker", "controller"}:
                raise ConfigError("controller.quorum.voters is required unless the node is "
                                  "a combined broker,controller running alone")
            host_port = (ordinary[0].host, ordinary[0].port)
            return cls(node_id, True, True, ordinary[0], tuple(advertised), inter, None,
                       {node_id: host_port}, True, tuple(ordinary), protocols,
                       controller_name)
        voters = parse_voters(voters_text)
        is_controller = "controller" in roles
        controller: Endpoint | None = None
        if is_controller:
            if node_id not in voters:
                raise ConfigError(f"controller.quorum.voters: this node ({node_id}) has the "
                                  "controller role but is not a voter")
            if own_controller:
                controller = own_controller[0]
            else:
                host, port = voters[node_id]
                controller = Endpoint(controller_name, host, port,
                                      protocols.get(controller_name, "PLAINTEXT"))
            if any(e.port == controller.port and e.host == controller.host for e in ordinary):
                raise ConfigError(f"controller.quorum.voters: voter {node_id}'s address "
                                  f"{controller} is also a broker listener")
        elif node_id in voters:
            raise ConfigError(f"controller.quorum.voters names this node ({node_id}) but "
                              "process.roles has no controller role")
        client = ordinary[0] if ordinary else None
        return cls(node_id, "broker" in roles, is_controller, client, tuple(advertised),
                   inter, controller, voters, False, tuple(ordinary), protocols,
                   controller_name)
