"""Authentication and authorization, independent of any wire protocol.

Everything here is sans-IO with respect to client connections: SASL mechanisms take the client's bytes and
answer bytes, a principal or a failure; the authorizer answers yes or no. The Kafka handler and the Pulsar
handler both drive these with their own framing (docs/security.md says what the wiring must do). The only
I/O in the package is fetching an OAuth JWKS document over HTTP(S) (kop/security/sasl/oauthbearer.py).
"""
