"""Kafka offsets over managed ledgers: broker entry metadata, the index interceptor, offset and time
search, the cursor cache, and the storage service the broker opens partition logs from."""

from kop.offset.api import FetchedBatch, OffsetOutOfRange, PartitionLog, Position, ReadResult
from kop.offset.compaction import CleaningState, CompactionResult
from kop.offset.cursor_cache import CursorCache
from kop.offset.partition_log import IndexInterceptor, ManagedPartitionLog
from kop.offset.producer_state import AbortedTxn, ProducerStateTable, SequenceError
from kop.offset.storage import LogStorage, open_embedded_storage

__all__ = [
    "AbortedTxn",
    "CleaningState",
    "CompactionResult",
    "CursorCache",
    "FetchedBatch",
    "IndexInterceptor",
    "ManagedPartitionLog",
    "OffsetOutOfRange",
    "PartitionLog",
    "ProducerStateTable",
    "Position",
    "ReadResult",
    "SequenceError",
    "LogStorage",
    "open_embedded_storage",
]
