"""The index interceptor: stamps each entry's broker entry metadata as its add is issued.

Pulsar's AppendIndexMetadataInterceptor + AppendBrokerTimestampMetadataInterceptor, kafka entry format. The
managed ledger calls it in ledger order, so ``index`` (offset of the batch's last record) is assigned when
the add is *issued* and restored when adds fail: offsets never have gaps. ``durable_index`` follows the
acknowledgements only (the high watermark never counts adds still in flight: KoP's kop#1512).

Kept apart from the partition log because the managed ledger owns its life cycle (it is handed to
ManagedLedgerFactory.open and recovered from the "index" property and the last entry before any partition
log exists); tests drive it with plain batches and no ledger at all.
"""

from __future__ import annotations

import contextlib
import struct
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kop.managed_ledger import ManagedLedgerInterceptor, Position
from kop.offset.entry_format import BATCH_TAIL, Buffer, EntryHeaderEncoder, NamedEntry, parse_entry
from kop.protocol.records import CONTROL_BIT, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT

INDEX_PROPERTY = "index"  # Pulsar's AppendIndexMetadataInterceptor property
TXN_BITS = TRANSACTIONAL_BIT | CONTROL_BIT

# What one add carries from issue to acknowledgement: (index before it, its index, its timestamp for the
# time index - the batch max timestamp, or the broker's for LogAppendTime batches).
AddContext = tuple[int, int, int]
_BASE = struct.Struct(">q")


class IndexInterceptor(ManagedLedgerInterceptor):
    """`index` counts records issued (offset of the last one, -1 when none); `durable_index` counts the
    acknowledged ones. Recovery: max(property "index", index in the last entry of the log)."""

    def __init__(self, on_durable: Callable[[Position, AddContext], None] | None = None) -> None:
        self.index = -1
        self.durable_index = -1
        self.on_durable = on_durable
        self._encoder = EntryHeaderEncoder()
        # Transactional and control batches are told to the partition's producer state when their add is
        # issued (their offsets are known from then on); undone when the add fails.
        self.on_txn_issue: Callable[[int, int, Buffer], None] | None = None
        self.on_txn_unissue: Callable[[int, Buffer], None] | None = None
        self._txn_inflight: deque[tuple[int, int, Buffer]] = deque()  # (base, index, batch) until durable

    def on_properties_initialize(self, properties: Mapping[str, str]) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.index = max(self.index, int(properties[INDEX_PROPERTY]))
        self.durable_index = self.index

    def on_open(self, last_entry: Buffer | None) -> None:
        if last_entry is not None:
            _, index, _ = parse_entry(last_entry)
            self.index = max(self.index, index)
        self.durable_index = self.index

    # `data` is what ManagedPartitionLog appends, one record batch (a Buffer); the managed ledger's contract
    # says Buffer | Sequence[Buffer] (a Sequence fails the header unpack below: TypeError, no index
    # timestamp, no transaction), and narrowing it for the checker would cost an isinstance per append.
    def before_add_entry(self, data: Any, num_messages: int) -> tuple[tuple[Buffer | Sequence[Buffer], ...], AddContext]:
        prev = self.index
        index = prev + num_messages
        self.index = index
        now = time.time_ns() // 1_000_000
        if type(data) is NamedEntry:  # a Pulsar SEND: its producer's name and sequence id go into the entry's metadata
            header = self._encoder.encode(now, index, num_messages, data.producer_name, data.sequence_id)
            data = data.batch
        else:
            header = self._encoder.encode(now, index, num_messages)
        try:
            attributes, _, _, max_ts = BATCH_TAIL.unpack_from(data, 21)
            ts = now if attributes & TIMESTAMP_TYPE_BIT else max_ts
            if attributes & TXN_BITS and self.on_txn_issue is not None:
                self.on_txn_issue(prev + 1, index, data)
                self._txn_inflight.append((prev + 1, index, data))
            # The batch is stored with its log base offset in place of the producer's (0): a zero-copy fetch
            # (issue 27) then sends it from the ledger file as it is. Outside the CRC; readers take offsets
            # from the index, never from here, so entries written before this (offset 0) read the same.
            return (header, _BASE.pack(prev + 1), memoryview(data)[8:]), (prev, index, ts)
        except (struct.error, TypeError):
            ts = now
        return (header, data), (prev, index, ts)

    def after_add_entry(self, position: Position, context: AddContext) -> None:
        self.durable_index = context[1]
        inflight = self._txn_inflight
        while inflight and inflight[0][1] <= context[1]:
            inflight.popleft()
        if self.on_durable is not None:
            self.on_durable(position, context)

    def on_adds_failed(self, first_context: AddContext) -> None:
        self.index = first_context[0]
        inflight = self._txn_inflight
        while inflight and inflight[-1][0] > first_context[0]:
            base, _, data = inflight.pop()
            if self.on_txn_unissue is not None:
                self.on_txn_unissue(base, data)

    def properties(self) -> Mapping[str, str]:
        return {INDEX_PROPERTY: str(self.durable_index)}
