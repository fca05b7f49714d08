"""SUBSCRIBE, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, SEEK, GET_LAST_MESSAGE_ID, UNSUBSCRIBE, CLOSE_CONSUMER.

The consumer side of kop/pulsar/subscription.py. SUBSCRIBE creates or joins a subscription of one partition:
Exclusive, Shared, Failover or Key_Shared, durable (a cursor in the metadata store, recovered when it exists) or not (a
reader: it starts at `start_message_id`, the entry itself included as Pulsar does - the client drops what it
should not see). Initial position Latest/Earliest applies to a new subscription only. SEEK by message id reads
again from that entry, by publish time from the first record whose Kafka timestamp is >= the time (the timestamp
is the publish time we give Kafka-produced messages); as in Pulsar, every consumer of the subscription is closed
(CLOSE_CONSUMER: the clients resubscribe) before SUCCESS. GET_LAST_MESSAGE_ID names the last entry with the batch
index of its last record, and the subscription's mark-delete position.

A consumer or reader with `read_compacted` reads the partition's compacted view (kop/pulsar/compacted.py); it is
refused NotAllowed on Shared and Key_Shared subscriptions, as Pulsar refuses it. When nothing was written after the
compaction's horizon, its GET_LAST_MESSAGE_ID names the last message the view keeps (Pulsar answers from the
compacted ledger then), not the partition's last entry, which the view may leave out.

A consumer's schema is registered on an idle topic or checked against the topic's (kop/pulsar/schemas.py).

Key_Shared takes AUTO_SPLIT and STICKY consumers (kop/pulsar/key_shared.py; a STICKY range that overlaps another
consumer's is refused ConsumerAssignError).

With `acknowledgmentAtBatchIndexLevelEnabled` an ACK whose message id has an ack set acknowledges only those messages
of the entry (Subscription.ack_batch_indexes; in memory, not in the cursor); without it such acks are ignored until
the whole entry is acknowledged, as Pulsar does.

Differences from Pulsar's broker: a consumer whose subscription type
differs from the connected consumers', or a second Exclusive consumer, gets ConsumerBusy without Pulsar's check
that the old connection is alive; acks for ids never delivered are ignored (Pulsar would delete those entries
too); ACK_RESPONSE is sent when the client asks (request_id set), once the ack is applied in memory, as Pulsar does.
Acks are persisted soon after they arrive (coalesced, at-least-once like Pulsar's rate-limited mark-delete), and
CLOSE_CONSUMER answers SUCCESS only once the subscription's cursor is persisted, so a client that closed its
consumer has its acknowledgements stored.

With `authorizationEnabled` (kop/pulsar/authorize.py) a SUBSCRIBE needs READ on the topic and, when durable, READ on
the GROUP named after the subscription, else ERROR AuthorizationError "Client is not authorized to subscribe";
GET_LAST_MESSAGE_ID needs DESCRIBE on the topic. Commands of an open consumer are not checked again (Pulsar's rule).
"""

from __future__ import annotations

import logging
from typing import Any

from kop.managed_ledger import Position
from kop.managed_ledger.cursor import NEXT_OFFSET
from kop.pulsar import authorize
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import Frame
from kop.pulsar.connection import PulsarConnection
from kop.pulsar.dedup import CURSOR as DEDUP_CURSOR
from kop.pulsar.lookup import open_partition
from kop.pulsar.schemas import SchemaRefused, check_subscriber
from kop.pulsar.subscription import (
    EXCLUSIVE,
    FAILOVER,
    KEY_SHARED,
    Consumer,
    PartitionState,
    Subscription,
    last_position,
)
from kop.topics.namespaces import MAX_CONSUMERS

log = logging.getLogger(__name__)

INT64_MAX = (1 << 63) - 1
LATEST, EARLIEST = 0, 1
STICKY = c.pb.KeySharedMode.STICKY


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _position(mid: c.MessageIdData) -> Position:
    return Position(_signed(mid.ledgerId), _signed(mid.entryId))


def _consumer(conn: PulsarConnection, consumer_id: int) -> Consumer | None:
    return conn.consumers.get(consumer_id)


def _consumer_or_error(conn: PulsarConnection, req: Any) -> Consumer | None:
    """The consumer a request with a request id names; None after answering ConsumerNotFound, as Pulsar does,
    or ServiceNotReady while the broker is not serving (cluster mode, kop/cluster/lease.py: the partition may
    be another broker's by now, so no answer comes from what this one holds)."""
    k = conn.consumers.get(req.consumer_id)
    if k is None:
        conn.send(c.error(req.request_id, c.ServerError.ConsumerNotFound, "consumer not found"))
    elif conn.handler.service.topics.paused:
        conn.send(c.error(req.request_id, c.ServerError.ServiceNotReady, "this broker is not serving now; retry"))
        return None
    return k


def served(conn: PulsarConnection, rid: int, state: PartitionState) -> bool:
    """Whether `state` is still served here (PartitionState.served); else the client is answered ServiceNotReady
    and looks the partition up again. Checked after a command's awaits, before it attaches anything: a partition
    released meanwhile (its session lost, or handed to another broker) has told its clients to go already, and a
    consumer attached to it afterwards would never hear of it - it would wait forever for messages (issue #24)."""
    if state.served():
        return True
    conn.send(c.error(rid, c.ServerError.ServiceNotReady, "the partition is not served by this broker now; retry"))
    return False


async def subscribe(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    existing = conn.consumers.get(req.consumer_id)
    if existing is not None:
        if existing.subscription.name == req.subscription:  # a retried SUBSCRIBE that had succeeded
            conn.send(c.command(c.SUCCESS, request_id=rid))
        else:
            conn.send(c.error(rid, c.ServerError.ConsumerBusy, f"consumer id {req.consumer_id} is in use"))
        return
    sub_type = req.subType
    ranges = None
    if sub_type == KEY_SHARED and req.HasField("keySharedMeta") and req.keySharedMeta.keySharedMode == STICKY:
        ranges = [(r.start, r.end) for r in req.keySharedMeta.hashRanges]
        if not ranges:
            conn.send(c.error(rid, c.ServerError.ConsumerAssignError, "a STICKY Key_Shared consumer needs hash ranges"))
            return
    if not req.subscription or req.subscription == DEDUP_CURSOR:
        conn.send(c.error(rid, c.ServerError.InvalidTopicName,
                          f"invalid subscription name {req.subscription!r} (empty or reserved)"))
        return
    if req.read_compacted and sub_type not in (EXCLUSIVE, FAILOVER):  # Pulsar's PersistentTopic.subscribe
        conn.send(c.error(rid, c.ServerError.NotAllowedError,
                          "readCompacted only allowed on failover or exclusive subscriptions"))
        return
    durable = not req.HasField("durable") or req.durable
    opened = await open_partition(conn, rid, req.topic, check=lambda name: authorize.subscribe_refusal(
        conn, name, req.subscription, durable))
    if opened is None:
        return
    topic, partition, state = opened
    idle = not state.producers and not any(s.consumers for s in state.subscriptions.values()) \
        and state.plog.high_watermark <= state.plog.log_start_offset
    try:  # kop/pulsar/schemas.py: registered on an idle topic, else checked against the stored versions
        await check_subscriber(conn, topic.name, req, idle)
    except SchemaRefused as e:
        conn.send(c.error(rid, e.code, str(e)))
        return
    # the topic's maxConsumers, else the namespace's maxConsumersPerTopic, checked before a subscription is made
    await conn.handler.service.topics.namespaces.fresh(topic.name)  # cluster mode: policies set elsewhere
    limit = conn.handler.service.topics.namespaces.limit(topic.name, MAX_CONSUMERS)
    if limit and sum(len(s.consumers) for s in state.subscriptions.values()) >= limit:  # 0: no limit
        conn.send(c.error(rid, c.ServerError.ConsumerBusy, "Topic reached max consumers limit"))
        return
    sub = state.subscriptions.get(req.subscription)
    if sub is None:
        sub = await _new_subscription(conn, state, req, durable)
        if sub is None:
            return
        if req.subscription in state.subscriptions:  # created meanwhile by another connection
            sub = state.subscriptions[req.subscription]
        else:
            state.subscriptions[req.subscription] = sub
    if sub.consumers and sub.sub_type != sub_type:
        conn.send(c.error(rid, c.ServerError.ConsumerBusy, "Subscription is of different type"))
        return
    if sub.consumers and sub_type == EXCLUSIVE:
        conn.send(c.error(rid, c.ServerError.ConsumerBusy, "Exclusive consumer is already connected"))
        return
    if not served(conn, rid, state):
        return
    sub.sub_type = sub_type
    sub.keep_without_consumers = False
    name = req.consumer_name or f"consumer-{req.consumer_id}"
    epoch = req.consumer_epoch if req.HasField("consumer_epoch") else None
    consumer = Consumer(conn, req.consumer_id, sub, name, req.priority_level, epoch)
    consumer.ranges = ranges
    consumer.read_compacted = req.read_compacted
    error = sub.add_consumer(consumer)
    if error is not None:
        conn.send(c.error(rid, c.ServerError.ConsumerAssignError, error))
        return
    conn.consumers[req.consumer_id] = consumer
    conn.send(c.command(c.SUCCESS, request_id=rid))


async def _new_subscription(conn: PulsarConnection, state: PartitionState, req: Any,
                            durable: bool) -> Subscription | None:
    """A subscription not served yet: a durable one is recovered from its stored cursor, or created at the
    initial position and stored at once (as Pulsar creates the cursor on SUBSCRIBE); a reader starts at its
    start message id. None once the client was answered an error (the partition left this broker)."""
    plog = state.plog
    initial = req.initialPosition if req.HasField("initialPosition") else LATEST
    # Latest = the last stable offset: records of a Kafka transaction still open are not skipped when it
    # commits (what Kafka's read_committed consumers do on a reset to latest).
    await plog.load_transactions()
    latest = plog.last_stable_offset
    start = plog.log_start_offset if initial == EARLIEST else latest
    if durable:
        got = await conn.handler.cursors.load(state.ledger_name, req.subscription)
        if not served(conn, req.request_id, state):
            return None  # released meanwhile: the new owner has the cursor, this broker must not write it
        if got is not None:
            info, version = got
            offset = info.properties.get(NEXT_OFFSET)
            if offset is None:  # a cursor written by someone else: resume after its mark-delete entry
                offset = start if info.mark_delete is None else await plog.offset_after(info.mark_delete)
            return Subscription(state, req.subscription, req.subType, True, max(offset, plog.log_start_offset),
                                info, version)
        sub = Subscription(state, req.subscription, req.subType, True, start)
        sub.save()
        return sub
    if req.HasField("start_message_id"):
        pos = _position(req.start_message_id)
        if pos.ledger_id >= INT64_MAX:  # MessageId.latest: the last stable offset (see above)
            start = latest if initial == LATEST else start
        else:  # MessageId.earliest (-1:-1) and ids before the log give its start, ids after it the end
            start = await plog.offset_of(pos)
    return Subscription(state, req.subscription, req.subType, False, start)


async def flow(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    k = _consumer(conn, req.consumer_id)
    if k is None:
        return
    # Bounded, so a storm of FLOWs cannot overflow anything; permits beyond this are meaningless anyway.
    k.permits = min(k.permits + req.messagePermits, 1 << 31)
    k.subscription.wake()


async def ack(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    k = _consumer(conn, req.consumer_id)
    if k is not None:
        positions = [_position(m) for m in req.message_id if not len(m.ack_set)]
        k.subscription.ack(positions, cumulative=req.ack_type == 1)
        if conn.handler.config.acknowledgmentAtBatchIndexLevelEnabled:  # else acks of part of an entry are ignored
            for m in req.message_id:
                if len(m.ack_set):
                    k.subscription.ack_batch_indexes(_position(m), list(m.ack_set), cumulative=req.ack_type == 1)
    if req.HasField("request_id"):
        fields = {"consumer_id": req.consumer_id, "request_id": req.request_id}
        if k is None:
            fields.update(error=c.ServerError.ConsumerNotFound, message="consumer not found")
        conn.send(c.command(c.ACK_RESPONSE, **fields))


async def redeliver(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    k = _consumer(conn, req.consumer_id)
    if k is None:
        return
    if req.HasField("consumer_epoch"):
        k.epoch = req.consumer_epoch
    ids = [_position(m) for m in req.message_ids] if len(req.message_ids) else None
    k.subscription.redeliver(k, ids)


async def seek(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    k = _consumer_or_error(conn, req)
    if k is None:
        return
    sub = k.subscription
    plog = sub.plog
    if req.HasField("message_id"):
        offset = await plog.offset_of(_position(req.message_id))
    elif req.HasField("message_publish_time"):
        found = await plog.offset_for_timestamp(req.message_publish_time)
        offset = found[0] if found is not None else plog.high_watermark
    else:
        conn.send(c.error(rid, c.ServerError.MetadataError, "SEEK needs a message id or a publish time"))
        return
    sub.keep_without_consumers = True
    for other in list(sub.consumers):
        other.conn.consumers.pop(other.consumer_id, None)
        other.conn.send(c.command(c.CLOSE_CONSUMER, consumer_id=other.consumer_id, request_id=0))
        sub.remove_consumer(other)
    sub.reset(offset)
    conn.send(c.command(c.SUCCESS, request_id=rid))


async def get_last_message_id(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    k = _consumer_or_error(conn, req)
    if k is None:
        return
    sub = k.subscription
    name = authorize.topic_of_ledger(sub.state.ledger_name)
    refusal = authorize.describe_refusal(conn, name, authorize.LAST_MESSAGE_ID) if name is not None else None
    if refusal is not None:
        conn.send(c.error(rid, c.ServerError.AuthorizationError, refusal))
        return
    last = await last_position(sub.plog)
    view = sub.state.compaction
    if k.read_compacted and last is not None and sub.plog.last_stable_offset - 1 <= view.horizon:
        last = await view.last_kept()  # nothing after the horizon: the view's last message (Pulsar's answer)
    partition = sub.state.partition
    if last is None:
        last_id = c.message_id(-1, -1, partition)
    else:
        last_id = c.message_id(last[0].ledger_id, last[0].entry_id, partition, last[1])
    md = await sub.mark_delete_for_client()
    conn.send(c.command(c.GET_LAST_MESSAGE_ID_RESPONSE, request_id=rid, last_message_id=last_id,
                        consumer_mark_delete_position=c.message_id(md.ledger_id, md.entry_id)))


async def unsubscribe(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    k = _consumer_or_error(conn, req)
    if k is None:
        return
    sub = k.subscription
    if any(o is not k for o in sub.consumers):
        conn.send(c.error(rid, c.ServerError.ConsumerBusy, "Subscription has active consumers"))
        return
    conn.consumers.pop(req.consumer_id, None)
    sub.consumers.clear()
    await sub.delete()
    conn.send(c.command(c.SUCCESS, request_id=rid))


async def close_consumer(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    k = conn.consumers.pop(req.consumer_id, None)
    if k is not None:
        k.subscription.remove_consumer(k)
        # The client flushed its pending acks before CLOSE_CONSUMER: once it sees SUCCESS they are durable.
        await k.subscription.flush()
    conn.send(c.command(c.SUCCESS, request_id=req.request_id))
