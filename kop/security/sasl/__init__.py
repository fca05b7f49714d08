"""Server side of the SASL mechanisms Kafka clients use: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER.

Each mechanism is a small state machine: ``await server.evaluate(client_bytes)`` answers a
:class:`~kop.security.sasl.base.Challenge` (send these bytes, expect more), a
:class:`~kop.security.sasl.base.Success` (authenticated as a principal) or a
:class:`~kop.security.sasl.base.Failure`. The caller owns the framing (SaslHandshake v0 raw tokens or
SaslAuthenticate, Pulsar's CommandConnect/AuthResponse), the failure delay and the connection. ``evaluate``
is a coroutine only because credentials may live in the metadata store and OAuth keys behind an HTTP URL.
"""

from kop.security.sasl.base import (
    Challenge,
    Failure,
    IllegalSaslState,
    SaslServer,
    Success,
    session_lifetime_ms,
)

__all__ = ["Challenge", "Failure", "IllegalSaslState", "SaslServer", "Success", "session_lifetime_ms"]
