"""Listener, voter and role configuration: what a node listens on and advertises."""

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.listeners import Endpoint, NodeAddresses, parse_listeners, parse_voters

VOTERS = "0@127.0.0.1:9100,1@127.0.0.1:9101,2@127.0.0.1:9102"


def resolve(**props: str) -> NodeAddresses:
    return NodeAddresses.resolve(BrokerConfig.load(props))


def test_the_pinned_cluster_command_listens_for_controllers_on_its_voter_entry():
    a = resolve(**{"broker.id": "1", "listeners": "127.0.0.1:9093",
                   "process.roles": "broker,controller", "controller.quorum.voters": VOTERS})
    assert a.client == Endpoint("PLAINTEXT", "127.0.0.1", 9093)
    assert a.controller == Endpoint("CONTROLLER", "127.0.0.1", 9101)
    assert a.voters == {0: ("127.0.0.1", 9100), 1: ("127.0.0.1", 9101), 2: ("127.0.0.1", 9102)}
    assert not a.single_node and a.is_broker and a.is_controller


def test_kafkas_named_controller_listener_form():
    a = resolve(**{"node.id": "0", "controller.quorum.voters": "0@localhost:9199",
                   "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9199",
                   "controller.listener.names": "CONTROLLER"})
    assert a.client == Endpoint("PLAINTEXT", "127.0.0.1", 9092)
    assert a.controller == Endpoint("CONTROLLER", "127.0.0.1", 9199)
    assert [e.name for e in a.advertised] == ["PLAINTEXT"]


def test_without_voters_a_node_is_its_own_single_voter():
    a = resolve(**{"broker.id": "4", "listeners": "127.0.0.1:9092"})
    assert a.single_node and a.voters == {4: ("127.0.0.1", 9092)} and a.controller is None


def test_two_advertised_listeners_and_the_inter_broker_one():
    a = resolve(**{"node.id": "0", "controller.quorum.voters": "0@broker-0:9093",
                   "listeners": "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092",
                   "advertised.listeners": "INTERNAL://broker-0:9092,EXTERNAL://127.0.0.1:19092",
                   "inter.broker.listener.name": "INTERNAL"})
    assert [str(e) for e in a.advertised] == ["broker-0:9092", "127.0.0.1:19092"]
    assert a.inter_broker == "INTERNAL"
    assert [str(e) for e in a.clients] == ["0.0.0.0:9092", "0.0.0.0:19092"]
    assert a.client == a.clients[0]


@pytest.mark.parametrize("props, message", [
    ({"controller.quorum.voters": "0@h"}, "expected HOST:PORT"),
    ({"controller.quorum.voters": "x@h:1"}, "expected ID@HOST:PORT"),
    ({"controller.quorum.voters": "0@h:1,0@h:2"}, "appears twice"),
    ({"controller.quorum.voters": "1@h:1"}, "is not a voter"),
    ({"process.roles": "broker"}, "controller.quorum.voters is required"),
    ({"process.roles": "broker,gateway"}, "process.roles"),
    ({"node.id": "1", "broker.id": "2"}, "node.id 1 and broker.id 2 differ"),
    ({"controller.quorum.voters": "0@127.0.0.1:9092", "listeners": "127.0.0.1:9092"},
     "also a broker listener"),
    ({"listeners": "INTERNAL://h:1", "advertised.listeners": "EXTERNAL://h:2"},
     "EXTERNAL is not a listener in listeners"),
    ({"listeners": "OUTSIDE://h:1"}, "no protocol for listener OUTSIDE"),
    ({"listeners": "OUTSIDE://h:1", "listener.security.protocol.map": "OUTSIDE:TLS"},
     "unknown security protocol TLS"),
    ({"listener.security.protocol.map": "PLAINTEXT"}, "expected NAME:PROTOCOL"),
])
def test_bad_configurations_are_refused_naming_the_key(props, message):
    with pytest.raises(ConfigError, match=message):
        resolve(**props)


def test_node_id_sets_broker_id():
    assert BrokerConfig.load({"node.id": "7"}).broker_id == 7


def test_parse_helpers():
    assert parse_listeners("h:1")[0] == Endpoint("PLAINTEXT", "h", 1)
    assert parse_voters(" 2@[::1]:9 ") == {2: ("::1", 9)}


def test_a_listener_named_in_the_protocol_map_is_accepted():
    a = resolve(**{"listeners": "OUTSIDE://h:1",
                   "listener.security.protocol.map": "OUTSIDE:PLAINTEXT"})
    assert a.client == Endpoint("OUTSIDE", "h", 1)


def test_each_listener_carries_its_security_protocol():
    a = resolve(**{
        "listeners": "PLAIN://h:1,TLS://h:2,SASL://h:3,BOTH://h:4,CONTROLLER://h:5",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,TLS:SSL,SASL:SASL_PLAINTEXT,"
                                          "BOTH:SASL_SSL,CONTROLLER:SSL",
        "inter.broker.listener.name": "BOTH",
        "controller.quorum.voters": "0@h:5"})
    assert [(e.name, e.security_protocol, e.uses_tls, e.uses_sasl) for e in a.clients] == [
        ("PLAIN", "PLAINTEXT", False, False), ("TLS", "SSL", True, False),
        ("SASL", "SASL_PLAINTEXT", False, True), ("BOTH", "SASL_SSL", True, True)]
    assert [e.security_protocol for e in a.advertised] == [
        "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
    assert a.controller == Endpoint("CONTROLLER", "h", 5, "SSL")
    assert a.protocol_of(a.inter_broker) == "SASL_SSL"
    assert a.protocol_of(a.controller_listener_name) == "SSL"


BOOTSTRAP = "127.0.0.1:9100,127.0.0.1:9101,127.0.0.1:9102"


def test_bootstrap_servers_with_voters_make_a_dynamic_quorum_of_those_voters():
    a = resolve(**{"broker.id": "1", "listeners": "127.0.0.1:9093",
                   "controller.quorum.voters": VOTERS,
                   "controller.quorum.bootstrap.servers": BOOTSTRAP})
    assert a.dynamic and a.bootstrap == (("127.0.0.1", 9100), ("127.0.0.1", 9101),
                                         ("127.0.0.1", 9102))
    assert sorted(a.voters) == [0, 1, 2]
    assert a.controller == Endpoint("CONTROLLER", "127.0.0.1", 9101)


def test_a_controller_joining_by_bootstrap_servers_needs_its_own_controller_listener():
    a = resolve(**{"node.id": "3", "process.roles": "controller",
                   "listeners": "CONTROLLER://127.0.0.1:9103",
                   "controller.quorum.bootstrap.servers": BOOTSTRAP})
    assert a.dynamic and a.voters == {} and a.is_controller and not a.is_broker
    assert a.controller == Endpoint("CONTROLLER", "127.0.0.1", 9103)
    with pytest.raises(ConfigError, match="controller listener"):
        resolve(**{"node.id": "3", "process.roles": "controller",
                   "controller.quorum.bootstrap.servers": BOOTSTRAP})
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        resolve(**{"node.id": "3", "listeners": "127.0.0.1:9092",
                   "controller.quorum.bootstrap.servers": "nohostport"})
