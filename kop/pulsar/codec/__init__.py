"""Pulsar's binary protocol, sans-IO: bytes in, objects out, and back.

- ``commands``    the protobuf messages (generated from our ``pulsar_api.proto``) and builders
- ``framing``     ``FrameReader`` (stream -> frames, size-limited, typed errors) and frame encoders
- ``batch``       the messages inside an entry (batched or not), batch payload encoding
- ``compression`` Pulsar's NONE/LZ4/ZLIB/ZSTD/SNAPPY payload codecs, with bounded decompression
"""
