"""Types of kop/pulsar/_native.c: the conversion loops of kop/pulsar/convert.py in C. Each returns None when it
declines a batch (convert.py then runs the Python loop)."""

from _typeshed import ReadableBuffer

def records_to_batch(data: ReadableBuffer, count: int, fixed_ts: int | None, base_ts: int, base_seq: int,
                     ids: dict[int, int] | None = None,
                     /) -> tuple[bytes, bytes | None, bool, int, tuple[int, ...]] | None: ...

def batch_to_records(data: ReadableBuffer, count: int, publish_time: int, prefix: bytes | None = None,
                     /) -> tuple[bytes, int, int, int] | None: ...
