"""Admin operations on the Pulsar subscriptions (managed cursors) of a partition: what pulsar-admin drives.

`SubscriptionsAdmin` implements kop/services.py's `PulsarSubscriptions`, the narrow interface the admin REST
(kop/admin/) sees; the pulsar handler sets it on the broker services when it starts. It works on the same
`Subscription` objects the dispatcher uses (kop/pulsar/subscription.py), so a change takes effect for connected
consumers at once; a durable subscription not served at the moment is loaded from its stored cursor first (and
stays loaded, consumer-less, as after its last consumer left).

What each operation does, as Pulsar's PersistentSubscription does it:

* reset cursor (by publish time or message id): the subscription's consumers are disconnected (CLOSE_CONSUMER;
  the clients subscribe again), the cursor moves - backwards or forwards - and acknowledgements after it are
  forgotten.
* skip N / skip all (clear backlog) / expire (messages published more than N seconds ago): the mark-delete
  position moves forward over unacknowledged entries, as acknowledgements would; connected consumers stay, and
  what they hold below the new position counts as acknowledged.
* peek N: the N-th unacknowledged entry after the mark-delete position (1 = the first), with Pulsar 4.0's
  X-Pulsar-* headers (the properties as one JSON header, X-Pulsar-PROPERTY); a batch entry is sent whole with
  X-Pulsar-num-batch-message, as Pulsar does. The stored Kafka batch keeps neither the Pulsar producer's name nor
  its sequence ids (kop/pulsar/convert.py), so those headers are absent / 0.

Counting follows Pulsar's: msgBacklog counts *entries* (Pulsar's getNumberOfEntriesInBacklog) - a Kafka batch
of N records or a Pulsar batch of N messages is one entry; unackedMessages counts messages.
"""

from __future__ import annotations

import base64
import datetime
import json
import time
import urllib.parse
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from kop.managed_ledger import Position
from kop.managed_ledger.cursor import NEXT_OFFSET
from kop.offset.api import NoSuchEntry, OffsetOutOfRange, PartitionLog
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.batch import decompress_payload
from kop.pulsar.compacted import AlreadyRunning
from kop.pulsar.convert import ConversionError, kafka_to_pulsar, unbatched
from kop.pulsar.dedup import CURSOR as DEDUP_CURSOR
from kop.pulsar.nonpersistent import metric_samples
from kop.pulsar.opaque import is_opaque
from kop.pulsar.subscription import (
    EXCLUSIVE,
    FAILOVER,
    KEY_SHARED,
    SHARED,
    Consumer,
    PartitionState,
    Subscription,
)
from kop.services import SubscriptionError
from kop.topics.manager import Topic
from kop.topics.topic_config import effective

if TYPE_CHECKING:
    from kop.pulsar.handler import PulsarProtocolHandler

TYPE_NAMES = {EXCLUSIVE: "Exclusive", SHARED: "Shared", FAILOVER: "Failover", KEY_SHARED: "Key_Shared"}


def _opaque_headers(md: Any, h: dict[str, str]) -> None:
    """The peek headers of an encrypted entry or a chunk, whose payload goes out unopened, as Pulsar 4.0's peek
    answers them (the first encryption key only, as there)."""
    if md.encryption_keys:
        h["X-Pulsar-Is-Encrypted"] = "true"
        h["X-Pulsar-Base64-encryption-keys"] = base64.b64encode(md.encryption_keys[0].SerializeToString()).decode()
        if md.HasField("encryption_param"):
            h["X-Pulsar-Base64-encryption-param"] = base64.b64encode(md.encryption_param).decode()
    if md.compression:
        h["X-Pulsar-compression"] = c.pb.CompressionType.Name(md.compression)
        h["X-Pulsar-uncompressed-size"] = str(md.uncompressed_size)
    if md.num_chunks_from_msg > 1:
        h["X-Pulsar-uuid"] = md.uuid
        h["X-Pulsar-num-chunks-from-msg"] = str(md.num_chunks_from_msg)
        h["X-Pulsar-total-chunk-msg-size"] = str(md.total_chunk_msg_size)
        h["X-Pulsar-chunk-id"] = str(md.chunk_id)


def _iso(ms: int) -> str:
    """Pulsar's DateFormatter format (ISO-8601 with offset), which the Java admin client parses back."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(timespec="milliseconds")


class SubscriptionsAdmin:
    def __init__(self, handler: PulsarProtocolHandler) -> None:
        self.handler = handler

    # ------------------------------------------------------------------ lookup
    async def _state(self, topic: Topic, partition: int) -> PartitionState:
        return await self.handler.partition_state(topic, partition)

    async def _get(self, state: PartitionState, name: str) -> Subscription | None:
        """The subscription named `name`: served now, or a durable one loaded from its stored cursor."""
        if name == DEDUP_CURSOR:
            return None
        sub = state.subscriptions.get(name)
        if sub is not None:
            return sub
        got = await self.handler.cursors.load(state.ledger_name, name)
        if got is None:
            return None
        info, version = got
        plog = state.plog
        offset = info.properties.get(NEXT_OFFSET)
        if offset is None:
            offset = plog.log_start_offset if info.mark_delete is None else await plog.offset_after(info.mark_delete)
        sub = state.subscriptions.get(name)  # loaded meanwhile by a SUBSCRIBE
        if sub is None:
            sub = Subscription(state, name, EXCLUSIVE, True, max(offset, plog.log_start_offset), info, version)
            state.subscriptions[name] = sub
        return sub

    async def _need(self, topic: Topic, partition: int, name: str) -> Subscription:
        sub = await self._get(await self._state(topic, partition), name)
        if sub is None:
            raise SubscriptionError(404, "Subscription not found")
        return sub

    # ------------------------------------------------------------------ queries
    async def names(self, topic: Topic, partition: int) -> list[str]:
        state = await self._state(topic, partition)
        stored = await self.handler.cursors.names(state.ledger_name)
        found = {n for n in stored if n != DEDUP_CURSOR} | set(state.subscriptions)
        return sorted(found)

    async def stats(self, topic: Topic, partition: int) -> dict[str, dict[str, Any]]:
        state = await self._state(topic, partition)
        out: dict[str, dict[str, Any]] = {}
        for name in await self.names(topic, partition):
            sub = await self._get(state, name)
            if sub is not None:
                out[name] = await subscription_stats(sub)
        return out

    async def peek(self, topic: Topic, partition: int, name: str, n: int) -> tuple[dict[str, str], bytes]:
        if n < 1:
            raise SubscriptionError(412, "Invalid message position: must be >= 1")
        sub = await self._need(topic, partition, name)
        pos = await nth_unacked(sub, n)
        if pos is None:
            raise SubscriptionError(404, "Message not found")
        return await _message(sub.state, pos)

    # ------------------------------------------------------------------ changes
    async def create(self, topic: Topic, partition: int, name: str, ledger_id: int, entry_id: int) -> None:
        if not name or name == DEDUP_CURSOR:
            raise SubscriptionError(412, f"Invalid subscription name {name!r}")
        state = await self._state(topic, partition)
        if await self._get(state, name) is not None:
            raise SubscriptionError(409, "Subscription already exists for topic")
        offset = await state.plog.offset_of(Position(ledger_id, entry_id))
        sub = Subscription(state, name, EXCLUSIVE, True, offset)
        state.subscriptions[name] = sub
        sub.save()
        await sub.flush()

    async def delete(self, topic: Topic, partition: int, name: str, force: bool) -> None:
        sub = await self._need(topic, partition, name)
        if sub.consumers and not force:
            raise SubscriptionError(412, "Subscription has active connected consumers")
        _disconnect(sub)
        await sub.delete()

    async def reset_to_time(self, topic: Topic, partition: int, name: str, timestamp_ms: int) -> None:
        sub = await self._need(topic, partition, name)
        await _reset(sub, await published_since(sub.plog, timestamp_ms))

    async def reset_to_position(self, topic: Topic, partition: int, name: str, ledger_id: int, entry_id: int,
                                excluded: bool) -> None:
        sub = await self._need(topic, partition, name)
        plog = sub.plog
        offset = await plog.offset_of(Position(ledger_id, entry_id))
        if excluded and offset < plog.high_watermark:
            offset = await plog.offset_after(await plog.position_of(offset))
        await _reset(sub, offset)

    async def skip(self, topic: Topic, partition: int, name: str, count: int) -> None:
        if count < 0:
            raise SubscriptionError(412, "Skip messages count must be >= 0")
        sub = await self._need(topic, partition, name)
        if count == 0:
            return
        pos = await nth_unacked(sub, count)
        target = sub.plog.high_watermark if pos is None else await sub.plog.offset_after(pos)
        await move_forward(sub, target)

    async def skip_all(self, topic: Topic, partition: int, name: str) -> None:
        sub = await self._need(topic, partition, name)
        await move_forward(sub, sub.plog.high_watermark)

    async def expire(self, topic: Topic, partition: int, name: str, seconds: int) -> None:
        sub = await self._need(topic, partition, name)
        await move_forward(sub, await published_since(sub.plog, int(time.time() * 1000) - seconds * 1000))

    def traffic(self, topic: Topic, partition: int) -> dict[str, int]:
        """Pulsar-protocol counters of a partition served now (zeros otherwise: nothing is opened)."""
        state = self.handler.partitions.get(topic.ledger_name(partition))
        if state is None:
            return {"msgInCounter": 0, "bytesInCounter": 0, "msgOutCounter": 0, "bytesOutCounter": 0,
                    "waitingPublishers": 0}
        subs = list(state.subscriptions.values())
        return {"msgInCounter": state.msg_in, "bytesInCounter": state.bytes_in,
                "msgOutCounter": sum(s.msg_out for s in subs), "bytesOutCounter": sum(s.bytes_out for s in subs),
                "waitingPublishers": len(state.waiting)}  # WaitForExclusive producers queued (produce.py)

    def connected(self, topic: Topic, partition: int) -> int:
        """Producers and consumers connected to a partition served now: Pulsar refuses to delete a topic that has
        any unless forced."""
        state = self.handler.partitions.get(topic.ledger_name(partition))
        if state is None:
            return 0
        return len(state.producers) + sum(len(s.consumers) for s in state.subscriptions.values())

    def unload(self, topic: Topic, partition: int) -> None:
        """Pulsar's topic unload (the admin REST's PUT .../unload): the partition's state is dropped and its producers
        and consumers told to reconnect (CLOSE_PRODUCER / CLOSE_CONSUMER), as when its bundle leaves this broker; they
        look the topic up again and find it here - the bundle stays - with its durable subscriptions as stored. An
        acknowledgment in flight may be lost, and its message delivered again, as after Pulsar's unload."""
        self.handler.partition_log_released(topic.ledger_name(partition))

    async def served(self) -> list[dict[str, Any]]:
        """Metrics: per subscription of every partition served now (nothing is opened for a scrape)."""
        out = []
        for state in list(self.handler.partitions.values()):
            tenant, ns, _domain, local = state.ledger_name.split("/", 3)
            where = {"namespace": f"{tenant}/{ns}",
                     "topic": f"persistent://{tenant}/{ns}/{urllib.parse.unquote(local)}"}
            for sub in list(state.subscriptions.values()):
                out.append({
                    **where, "subscription": sub.name,
                    "msgBacklog": await backlog_entries(sub), "unackedMessages": unacked_messages(sub),
                    "consumers": len(sub.consumers), "msgOutCounter": sub.msg_out, "bytesOutCounter": sub.bytes_out,
                    "msgInCounter": state.msg_in, "bytesInCounter": state.bytes_in, "producers": len(state.producers),
                })
            if not state.subscriptions:
                out.append({**where, "subscription": None,
                            "msgInCounter": state.msg_in, "bytesInCounter": state.bytes_in,
                            "producers": len(state.producers)})
        for topic in list(self.handler.non_persistent.topics.values()):
            out.extend(metric_samples(topic))
        return out

    # ------------------------------------------------------------------ retention
    async def backlog_floor(self, topic: Topic, partition: int) -> int | None:
        """The lowest Kafka offset a durable subscription has not acknowledged (retention keeps its
        ledger and every later one), None when no durable subscription exists."""
        state = await self._state(topic, partition)
        floors = []
        for name in await self.names(topic, partition):
            sub = await self._get(state, name)
            if sub is not None and sub.durable:
                floors.append(sub.next_offset)
        return min(floors) if floors else None

    # ------------------------------------------------------------------ compaction (kop/pulsar/compacted.py)
    async def trigger_compaction(self, topic: Topic, partition: int) -> None:
        """Start compacting the partition (a compact topic: the Kafka cleaner's pass first); 409 while one runs."""
        state = await self._state(topic, partition)
        config = self.handler.config
        before = None
        if "compact" in effective(topic.configs, "cleanup.policy", config):
            retention_ms = int(effective(topic.configs, "delete.retention.ms", config))

            def before() -> Awaitable[object]:
                return state.plog.compact(retention_ms, roll_current=True)

        try:
            state.compaction.trigger(before)
        except AlreadyRunning as e:
            raise SubscriptionError(409, str(e)) from None

    async def compaction_status(self, topic: Topic, partition: int) -> dict[str, str]:
        """Pulsar's LongRunningProcessStatus of the partition's compaction."""
        view = (await self._state(topic, partition)).compaction
        return {"status": view.status, "lastError": view.last_error}


# ---------------------------------------------------------------------------------------------- helpers


def _disconnect(sub: Subscription) -> None:
    """Close the subscription's consumers as Pulsar's disconnect does: the clients subscribe again."""
    sub.keep_without_consumers = True
    for k in list(sub.consumers):
        k.conn.consumers.pop(k.consumer_id, None)
        k.conn.send(c.command(c.CLOSE_CONSUMER, consumer_id=k.consumer_id, request_id=0))
        sub.remove_consumer(k)
    sub.keep_without_consumers = False


async def _reset(sub: Subscription, offset: int) -> None:
    _disconnect(sub)
    sub.reset(max(offset, sub.plog.log_start_offset))
    sub.stop()
    await sub.flush()


async def move_forward(sub: Subscription, offset: int) -> None:
    """Acknowledge everything before `offset` (never moves back): outstanding entries below it count as
    acknowledged, and the mark-delete position becomes the entry before `offset`."""
    plog = sub.plog
    offset = min(offset, plog.high_watermark)
    if offset <= sub.next_offset:
        return
    below = [pos for pos, e in sub.outstanding.items() if e.last_offset < offset]
    if below:
        sub.ack(below, cumulative=False)
    if not sub.outstanding and sub.next_offset < offset:
        try:
            sub.mark_delete = await plog.position_of(offset - 1)
        except OffsetOutOfRange:
            sub.mark_delete = None
        sub.acked.clear()
        sub.next_offset = offset
        sub.read_offset = max(sub.read_offset, offset)
    sub.save()
    sub.wake()
    await sub.flush()


async def published_since(plog: PartitionLog, timestamp_ms: int) -> int:
    """The first offset of the first entry whose publish time - as our consumers see it: the Kafka timestamp,
    which is the Pulsar event time when the producer set one (kop/pulsar/convert.py) - is at or after
    `timestamp_ms`; the end of the log when there is none. Pulsar's reset-cursor by time and expire-messages
    go by publish time; this is the time a client of ours reads as publish time, so a reset to a message's
    publish time lands on that message."""
    found = await plog.offset_for_timestamp(timestamp_ms)
    return found[0] if found is not None else plog.high_watermark


async def nth_unacked(sub: Subscription, n: int) -> Position | None:
    """The position of the n-th (1-based) entry after the mark-delete position not acknowledged
    individually; None when the backlog holds fewer."""
    return await sub.plog.nth_position_from(sub.next_offset, n, sub.acked)


async def backlog_entries(sub: Subscription) -> int:
    """Entries after the mark-delete position not acknowledged individually (Pulsar's msgBacklog)."""
    plog = sub.plog
    if sub.next_offset >= plog.high_watermark:
        return 0
    try:
        entries = await plog.entries_from(sub.next_offset)
    except Exception:  # noqa: BLE001 - the log changed under us (retention): count what it holds
        entries = await plog.entries_from(plog.log_start_offset)
    return max(0, entries - len(sub.acked))


def unacked_messages(sub: Subscription, consumer: Consumer | None = None) -> int:
    positions = sub.pending if consumer is None else consumer.pending
    total = 0
    for pos in positions:
        e = sub.outstanding.get(pos)
        if e is not None:
            part = sub.batch_acks.get(pos)  # acknowledged in part (batch-index acks): what is left
            total += e.last_offset - e.base_offset + 1 if part is None else part.bit_count()
    return total


async def subscription_stats(sub: Subscription) -> dict[str, Any]:
    """Pulsar's SubscriptionStats (the fields this broker has)."""
    consumers = [{
        "consumerName": k.name,
        "availablePermits": k.permits,
        "unackedMessages": unacked_messages(sub, k),
        "blockedConsumerOnUnackedMsgs": False,
        "address": _address(k),
        "connectedSince": _iso(k.connected_since),
        "msgRateOut": 0.0,
        "msgThroughputOut": 0.0,
        "metadata": {},
    } for k in sub.consumers]
    backlog = await backlog_entries(sub)
    return {
        "msgRateOut": 0.0,
        "msgThroughputOut": 0.0,
        "bytesOutCounter": sub.bytes_out,
        "msgOutCounter": sub.msg_out,
        "msgRateRedeliver": 0.0,
        "msgBacklog": backlog,
        # entries held back by delayed delivery (kop/pulsar/delayed.py), as Pulsar's getNumberOfDelayedMessages
        "msgBacklogNoDelayed": max(backlog - len(sub.delayed), 0),
        "msgDelayed": len(sub.delayed),
        "unackedMessages": unacked_messages(sub),
        "type": TYPE_NAMES.get(sub.sub_type, "Exclusive"),
        "msgRateExpired": 0.0,
        "consumers": consumers,
        "isDurable": sub.durable,
        "isReplicated": False,
        "blockedSubscriptionOnUnackedMsgs": False,
        "markDeletePosition": "-1:-1" if sub.mark_delete is None else str(sub.mark_delete),
        "nextOffset": sub.next_offset,
    }


def _address(k: Consumer) -> str:
    transport = k.conn.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    return f"/{peer[0]}:{peer[1]}" if peer else ""


async def _message(state: PartitionState, pos: Position) -> tuple[dict[str, str], bytes]:
    """One entry as Pulsar's peek answers it: X-Pulsar-* headers and the (uncompressed) payload."""
    plog = state.plog
    try:
        offsets = await plog.entry_offsets(pos)
        got = await plog.read(offsets.base_offset, 1)
    except (NoSuchEntry, OffsetOutOfRange):
        raise SubscriptionError(404, f"Message not found: entry {pos} is gone") from None
    fb = next((b for b in got.batches if b.position == pos), None)
    if fb is None:
        raise SubscriptionError(404, f"Message not found: entry {pos} is gone")
    try:
        entry = kafka_to_pulsar(fb.batch)
    except ConversionError as e:
        raise SubscriptionError(500, f"entry {pos} does not convert: {e}") from None
    if entry is None:
        raise SubscriptionError(404, f"Message not found: entry {pos} is a control entry")
    entry = unbatched(entry)
    md = entry.metadata
    # an encrypted entry or a chunk (kop/pulsar/opaque.py) is shown as stored: its client alone can open it
    body = bytes(entry.payload) if is_opaque(md) else bytes(decompress_payload(md, entry.payload))
    h: dict[str, str] = {"X-Pulsar-Message-ID": f"{pos.ledger_id}:{pos.entry_id}"}
    h["X-Pulsar-publish-time"] = _iso(md.publish_time)
    if md.HasField("event_time") and md.event_time:
        h["X-Pulsar-event-time"] = _iso(md.event_time)
    if md.HasField("deliver_at_time"):
        h["X-Pulsar-deliver-at-time"] = _iso(md.deliver_at_time)
    if md.producer_name:
        h["X-Pulsar-producer-name"] = md.producer_name
    h["X-Pulsar-sequence-id"] = str(md.sequence_id)
    h["X-Pulsar-Broker-Entry-METADATA-index"] = str(offsets.last_offset)  # the entry's last index, as Pulsar's
    if offsets.append_time > 0:
        h["X-Pulsar-Broker-Entry-METADATA-timestamp"] = _iso(offsets.append_time)
    if md.HasField("partition_key"):
        h["X-Pulsar-partition-key"] = md.partition_key
        if md.partition_key_b64_encoded:
            h["X-Pulsar-partition-key-b64-encoded"] = "true"
    if md.HasField("null_value") and md.null_value:
        h["X-Pulsar-null-value"] = "true"
    if md.properties:  # Pulsar 4.0's form: one header, the properties as a JSON object
        h["X-Pulsar-PROPERTY"] = json.dumps({kv.key: kv.value for kv in md.properties}, separators=(",", ":"))
    h["X-Pulsar-Is-Encrypted"] = "false"
    if is_opaque(md):
        _opaque_headers(md, h)
    h["X-Pulsar-txn-uncommitted"] = "false"
    # Pulsar 5.0 sends it for every entry (true up to the topic's max read position: always, without transactions),
    # and its admin client shows it among the message's properties
    h["X-Pulsar-txn-consumable"] = "true"
    if md.HasField("num_messages_in_batch"):
        h["X-Pulsar-num-batch-message"] = str(md.num_messages_in_batch)
        h["X-Pulsar-batch-size"] = str(len(body))
    return h, body
