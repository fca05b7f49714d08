"""CONNECT/CONNECTED and PING/PONG: the connection-level commands.

CONNECTED answers min(our highest protocol version, the client's) - the client gates features on it (>= 6
checksums, >= 12 GET_LAST_MESSAGE_ID) - with `maxMessageSize` and our feature flags. Differences from
Pulsar's broker: no authentication methods (every CONNECT is accepted; the security issue adds them), no
proxy-to-broker URL, and `supports_broker_entry_metadata` is not offered (message ids carry no index yet).
"""

from __future__ import annotations

from kop import __version__
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import Frame
from kop.pulsar.connection import PulsarConnection, serves


@serves(c.CONNECT)
async def connect(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    if conn.connected:
        conn.send(c.error(0, c.ServerError.NotAllowedError, "already connected"))
        return
    version = min(c.MAX_PROTOCOL_VERSION, req.protocol_version if req.HasField("protocol_version") else 0)
    conn.protocol_version = version
    conn.connected = True
    conn.send(c.command(c.CONNECTED, server_version=f"kop-{__version__}", protocol_version=version,
                        max_message_size=conn.handler.config.maxMessageSize))


@serves(c.PING)
async def ping(conn: PulsarConnection, frame: Frame) -> None:
    conn.send(c.command(c.PONG))


@serves(c.PONG)
async def pong(conn: PulsarConnection, frame: Frame) -> None:
    return None
