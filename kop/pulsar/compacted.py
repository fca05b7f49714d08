"""Pulsar's topic compaction on one partition: the trigger and status the admin REST drives, and the compacted view
that `readCompacted` consumers and readers read (issue #22).

Apache Pulsar compacts a topic of any kind into a separate compacted ledger (latest message of each key up to the
compaction's horizon, the last message when it started) and keeps the topic itself whole; a consumer with
readCompacted (Exclusive or Failover only) reads that ledger and then the topic after the horizon. Here a
compaction does the same without a second copy of the data:

* The horizon (the last offset the compaction covered: the partition's last stable offset - 1 when it started) is
  stored in the managed ledger's properties (``kop.pulsarCompactionHorizon``), so it outlives a restart.
* The view is a key map: key -> offset of the key's latest record at or below the horizon. A readCompacted
  subscription's dispatcher (kop/pulsar/subscription.py) delivers, of each entry at or below the horizon, only the
  records the map names; an entry left with none is skipped as a marker is (acknowledged, never sent); a batch left
  with some goes out as Pulsar's compactor rewrites it, each message left out an empty slot marked `compacted_out`
  (PartitionState.compacted): the Java client skips those, the C++ client hands them out as empty messages - as
  with Apache Pulsar - and acknowledging the batch's messages acknowledges the entry. (An ack set would hide them
  from the C++ client too, but that client then never acknowledges the entry: it is redelivered.) The map is kept
  in memory, built when the compaction runs or, after a restart, when a readCompacted
  subscription first needs it (one read of the partition up to the horizon).
* What the map keeps, as Pulsar 4.2's PublishingOrderCompactor (topicCompactionRetainNullKey=false) does: keyless
  messages are dropped, and a key's latest message removes the key when its payload is empty - batched or not, a
  null value (a Kafka tombstone, a Pulsar null_value message) or an empty one, whoever wrote it (``record_keys``).
  Pulsar 4.2.4 (AbstractTwoPhaseCompactor.extractKeyAndSize, RawBatchConverter) judges a message by its payload's
  size: a batched message's payload_size; an unbatched one's 0 when null_value is set, else its uncompressed_size
  when set, else its payload's bytes (4.0 counted the metadata in an unbatched message's size, so an unbatched
  empty message from a client that leaves uncompressed_size unset - the C++ and Python ones - stayed; 4.2 counts
  the payload alone, apache/pulsar#25817). An encrypted entry (stored opaque, kop/pulsar/opaque.py) is judged by
  its stored metadata the same way: null_value, else the uncompressed_size its producer set (the Java client
  does: an encrypted empty message deletes), else its ciphertext, which is never empty. This is the Pulsar view's rule only: the Kafka log cleaner keeps Kafka's (only a null
  value is a tombstone; an empty value is a value), so on a `compact` topic an empty value stays in the log for
  Kafka consumers while readCompacted consumers no longer see its key.
* cleanup.policy: on a `compact` topic the trigger first runs a pass of the Kafka log cleaner (roll the current
  ledger, kop/offset/compaction.py), so the space is reclaimed for both protocols at once; on a `delete` topic
  (Pulsar's default, and Kafka's) nothing is removed from the log - every consumer without readCompacted, and
  every Kafka consumer, still reads everything, as in Pulsar. Retention still trims the log: keys whose records
  retention removed are gone from the view too (Pulsar's compacted ledger keeps them).

Status (Pulsar's LongRunningProcessStatus): NOT_RUN until the first trigger since the partition was opened here
(in memory, as Pulsar's is), RUNNING, SUCCESS, or ERROR with lastError; a trigger while one runs is refused
(Pulsar: 409 "Compaction already in progress").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kop.offset.api import FetchedBatch, NoSuchEntry, OffsetOutOfRange
from kop.protocol.compaction import payload_of, record_spans
from kop.protocol.records import CONTROL_BIT, CorruptRecordError, read_varint
from kop.pulsar.opaque import entry_of

if TYPE_CHECKING:
    from kop.managed_ledger import Position
    from kop.offset.api import PartitionLog

log = logging.getLogger(__name__)

HORIZON_PROPERTY = "kop.pulsarCompactionHorizon"
NOT_RUN, RUNNING, SUCCESS, ERROR = "NOT_RUN", "RUNNING", "SUCCESS", "ERROR"
_READ_BYTES = 1 << 20


class AlreadyRunning(Exception):  # noqa: N818 - Pulsar's AlreadyRunningException
    """A compaction of this partition is in progress."""


def record_keys(batch: memoryview | bytes) -> list[tuple[int, bytes | None, bool]] | None:
    """(offset delta, key, whether it deletes its key from the Pulsar view) of each record of a batch; None for a
    control batch. A record deletes its key when its payload is empty (see the module docstring: Pulsar 4.2's
    rule, not Kafka's)."""
    header, data = payload_of(batch)
    if header.attributes & CONTROL_BIT:
        return None
    spans = record_spans(data, header.records_count)
    opaque = entry_of(header, data)  # an encrypted or chunked entry: one record, its metadata stored beside it
    if opaque is not None:
        md, payload, _messages = opaque
        size = 0 if md.null_value else md.uncompressed_size if md.HasField("uncompressed_size") else len(payload)
        return [(spans[0].offset_delta, spans[0].key, size <= 0)]
    out = []
    for span in spans:
        deletes = span.is_tombstone
        if not deletes and span.key is not None:
            pos = read_varint(data, span.rest)[1]  # past the offset delta
            klen, pos = read_varint(data, pos)
            deletes = read_varint(data, pos + klen)[0] == 0  # an empty value
        out.append((span.offset_delta, span.key, deletes))
    return out


class CompactedView:
    """One partition's compaction: status, horizon and key map (see the module docstring)."""

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog
        self.status = NOT_RUN
        self.last_error = ""
        stored = plog.ml.properties.get(HORIZON_PROPERTY)
        self.horizon = int(stored) if stored else -1  # the last offset compacted, -1 = never compacted
        self._latest: dict[bytes, int] | None = None  # None: not built since the partition was opened
        self._building: asyncio.Task[dict[bytes, int]] | None = None
        self._task: asyncio.Task[None] | None = None

    def trigger(self, before: Callable[[], Awaitable[object]] | None = None) -> None:
        """Start a compaction (`before`: the Kafka cleaner's pass of a compact topic); AlreadyRunning while one
        runs. Returns at once, as Pulsar's trigger does; the status says when it is done."""
        if self.status == RUNNING:
            raise AlreadyRunning("Compaction already in progress")
        self.status, self.last_error = RUNNING, ""
        self._task = asyncio.get_running_loop().create_task(self._run(before))

    async def _run(self, before: Callable[[], Awaitable[object]] | None) -> None:
        try:
            if before is not None:
                await before()
            plog = self.plog
            await plog.load_transactions()
            horizon = plog.last_stable_offset - 1
            latest = await _key_map(plog, horizon)
            await plog.ml.set_properties({HORIZON_PROPERTY: str(horizon)})
            self.horizon, self._latest = horizon, latest
            self.status = SUCCESS
        except Exception as e:  # the status reports it (Pulsar's lastError)
            log.warning("%s: compaction failed: %s", self.plog.name, e)
            self.status, self.last_error = ERROR, str(e) or type(e).__name__

    def stop(self) -> None:
        """The partition is closed or no longer served here: a compaction in progress ends, ERROR (the next
        PartitionState starts at NOT_RUN, keeping the horizon of the last one that ended)."""
        for task in (self._task, self._building):
            if task is not None and not task.done():
                task.cancel()
        if self.status == RUNNING:
            self.status, self.last_error = ERROR, "the partition was closed during the compaction"

    async def latest(self) -> dict[bytes, int]:
        """The key map up to the horizon, built on first use after a restart (concurrent callers share one read)."""
        if self._latest is not None:
            return self._latest
        if self._building is None:
            self._building = asyncio.get_running_loop().create_task(_key_map(self.plog, self.horizon))
        try:
            got = await asyncio.shield(self._building)
        finally:
            if self._building is not None and self._building.done():
                self._building = None
        if self._latest is None:
            self._latest = got
        return self._latest

    async def last_kept(self) -> tuple[Position, int] | None:
        """What GET_LAST_MESSAGE_ID names to a readCompacted consumer when nothing was written after the horizon, as
        Pulsar answers it then from the compacted ledger: (position, batch index: -1 for a one-record entry) of the
        last message the view keeps, None when it keeps none. The partition's own last entry may be one the view
        leaves out (a trailing empty value or tombstone): named, it would have clients wait for it
        (hasMessageAvailable true, no message ever coming)."""
        latest = await self.latest()
        if not latest:
            return None
        offset = max(latest.values())
        try:
            pos = await self.plog.position_of(offset)
            entry = await self.plog.entry_offsets(pos)
        except (OffsetOutOfRange, NoSuchEntry):  # retention removed it since the view was built
            return None
        return pos, offset - entry.base_offset if entry.last_offset > entry.base_offset else -1

    def covers(self, fb: FetchedBatch) -> bool:
        """Whether the entry starts at or below the horizon (the view decides which of its records go out)."""
        return fb.base_offset <= self.horizon

    async def kept(self, fb: FetchedBatch, messages: int) -> int:
        """The bits (bit i = message i) of the entry's messages a readCompacted consumer gets; (1 << messages) - 1
        for all of them. An entry whose messages do not map one to one onto its records (an encrypted batch stored
        as one record) goes out whole or not at all, after its one record."""
        latest = await self.latest()
        try:
            records = record_keys(fb.batch)
        except CorruptRecordError:
            return (1 << messages) - 1  # what the dispatcher's conversion makes of it
        if records is None:
            return 0
        bits = 0
        for i, (delta, key, _) in enumerate(records):
            offset = fb.base_offset + delta
            if offset > self.horizon or (key is not None and latest.get(key) == offset):
                bits |= 1 << i
        if len(records) != messages:
            return (1 << messages) - 1 if bits else 0
        return bits


async def _key_map(plog: PartitionLog, horizon: int) -> dict[bytes, int]:
    """key -> offset of its latest record at or below `horizon` (committed records only; see the docstring for
    what removes a key)."""
    latest: dict[bytes, int] = {}
    await plog.load_transactions()  # is_aborted_batch needs it
    offset = plog.log_start_offset
    while offset <= horizon:
        try:
            got = await plog.read(offset, _READ_BYTES)
        except OffsetOutOfRange:
            offset = plog.log_start_offset
            continue
        if not got.batches:
            break
        for fb in got.batches:
            offset = fb.last_offset + 1
            if fb.base_offset > horizon or plog.is_aborted_batch(fb.batch, fb.base_offset):
                continue
            try:
                records = record_keys(fb.batch)
            except CorruptRecordError as e:
                log.warning("%s: entry at %d left out of the compaction: %s", plog.name, fb.base_offset, e)
                continue
            for delta, key, deletes in records or ():
                at = fb.base_offset + delta
                if key is None or at > horizon:
                    continue
                if deletes:
                    latest.pop(key, None)
                else:
                    latest[key] = at
        await asyncio.sleep(0)
    return latest
