"""CONSUMER_STATS: what the broker knows of one consumer, as Pulsar's ServerCnx answers it (CONSUMER_STATS_RESPONSE).

Real values: consumerName, availablePermits (the FLOW permits not yet used; never below 0 - the field is unsigned),
unackedMessages (messages of the entries sent to this consumer and not acknowledged; like Pulsar, counted for Shared
and Key_Shared subscriptions only - Pulsar does not track them for Exclusive and Failover, and answers 0), address
(`/ip:port`, as Pulsar prints the client's address), connectedSince (Pulsar's ISO-8601 form), type (the
subscription's) and msgBacklog (entries after the mark-delete position not acknowledged, Pulsar's
getNumberOfEntriesInBacklog). A consumer id this connection does not have: ConsumerNotFound "Consumer <id> not found".

Differences from Pulsar: the rates (msgRateOut, msgThroughputOut, msgRateRedeliver, msgRateExpired, messageAckRate)
are 0 - we count messages and bytes (admin stats) but keep no rate windows per consumer; blockedConsumerOnUnackedMsgs
is always false, since consumers are never blocked on unacknowledged messages here (Pulsar's
maxUnackedMessagesPerConsumer is not served). The Java client (4.x) no longer sends this command; the C++ client's
getBrokerConsumerStats does, and pulsar-client's Python wrapper does not expose it.
"""

from __future__ import annotations

from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import Frame
from kop.pulsar.connection import PulsarConnection
from kop.pulsar.subscription import KEY_SHARED, SHARED
from kop.pulsar.subscriptions import TYPE_NAMES, _address, _iso, backlog_entries, unacked_messages


async def consumer_stats(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    k = conn.consumers.get(req.consumer_id)
    if k is None:
        conn.send(c.command(c.CONSUMER_STATS_RESPONSE, request_id=rid, error_code=c.ServerError.ConsumerNotFound,
                            error_message=f"Consumer {req.consumer_id} not found"))
        return
    sub = k.subscription
    individual = sub.sub_type in (SHARED, KEY_SHARED)  # Pulsar's isIndividualAckMode
    conn.send(c.command(
        c.CONSUMER_STATS_RESPONSE, request_id=rid,
        msgRateOut=0.0, msgThroughputOut=0.0, msgRateRedeliver=0.0,
        consumerName=k.name,
        availablePermits=max(k.permits, 0),
        unackedMessages=unacked_messages(sub, k) if individual else 0,
        blockedConsumerOnUnackedMsgs=False,
        address=_address(k),
        connectedSince=_iso(k.connected_since),
        type=TYPE_NAMES.get(sub.sub_type, "Exclusive"),
        msgRateExpired=0.0,
        msgBacklog=await backlog_entries(sub),
    ))
