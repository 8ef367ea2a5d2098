"""Security: who a connection is and what it may do.

The package holds the three layers Kafka has, each in its own modules:
- encryption: TLS contexts for SSL and SASL_SSL listeners, and the principal a client
  certificate carries;
- authentication: the SASL server (SaslHandshake, SaslAuthenticate; PLAIN and SCRAM), per
  connection, before any other request is served;
- authorization: the ACLs of the metadata log and the StandardAuthorizer semantics handlers
  check against.

Mechanism state machines that both ends need (SCRAM, PLAIN) are sans-IO and live in
protocol/sasl.py, so the broker's own inter-broker connections and the client library share
them.
"""
