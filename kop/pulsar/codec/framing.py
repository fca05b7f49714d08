"""Pulsar frames, sans-IO: bytes in, frames out (``FrameReader``); frames out as bytes (``encode_*``).

Wire layout (big-endian)::

    simple:   u32 total · u32 command_size · BaseCommand
    payload:  u32 total · u32 command_size · BaseCommand · headers_and_payload
    headers_and_payload = [u16 0x0e02 · u32 size · BrokerEntryMetadata]   (broker -> client only)
                          [u16 0x0e01 · u32 crc32c]                          (crc of the rest)
                          u32 metadata_size · MessageMetadata · payload

``total`` counts every byte after itself. ``headers_and_payload`` without the 0x0e02 part is exactly
what a producer's SEND carries and what a stored entry holds after its broker entry metadata, so a
handler can store it as received and put it after a MESSAGE command unchanged.

Hostile peers: the reader never allocates what a length field announces. Bytes are appended to one
growing buffer as they arrive and a frame is cut out only once all of it is there; a frame announcing
more than ``max_frame_size`` (Pulsar's 5 MiB max message size + 10 KiB, like Pulsar's frame decoder)
is refused before any of its body arrives. Errors are typed so the handler can choose its answer:
``ChecksumMismatch`` leaves the reader usable (Pulsar answers SEND_ERROR ChecksumError and keeps the
connection); every other ``FrameError`` means the stream is out of step, close the connection.
"""

from __future__ import annotations

import struct
from typing import Any, cast

from google.protobuf.message import DecodeError

from kop.protocol.compression import BytesLike
from kop.protocol.records import crc32c
from kop.storage.protobuf import VARINT, ProtobufError, iter_fields

from . import commands as c
from .commands import pb

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
FRAME_PADDING = 10 * 1024
DEFAULT_MAX_FRAME_SIZE = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING

CHECKSUM_MAGIC = b"\x0e\x01"
BROKER_ENTRY_METADATA_MAGIC = b"\x0e\x02"

_U32 = struct.Struct(">I")
_U32x2 = struct.Struct(">II")
_HEAD = struct.Struct(">HI")  # magic, size or crc


class FrameError(Exception):
    """A frame the reader cannot accept."""


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes is over the {limit}-byte limit")
        self.size = size
        self.limit = limit


class MalformedFrame(FrameError):
    """Sizes that do not add up, or bytes that are not a BaseCommand / MessageMetadata."""


class TruncatedFrame(FrameError):
    """The stream ended inside a frame (raised by ``FrameReader.close``)."""


class UnknownCommand(FrameError):
    """A well-framed BaseCommand whose type is outside our subset. The reader stays usable: the
    handler may answer (Pulsar's broker logs and ignores unknown types) or close."""

    def __init__(self, type_: int | None) -> None:
        super().__init__(f"unknown command type {type_}")
        self.type = type_


class ChecksumMismatch(FrameError):
    """A payload frame whose CRC32C does not match. The reader stays usable; ``frame`` has the parsed
    command (for SEND: the producer id and sequence id to answer SEND_ERROR ChecksumError with)."""

    def __init__(self, frame: Frame, expected: int, actual: int) -> None:
        super().__init__(f"payload checksum {actual:#010x} does not match the frame's {expected:#010x}")
        self.frame = frame
        self.expected = expected
        self.actual = actual


class Frame:
    """One received frame. ``headers_and_payload`` is None for simple commands; for SEND/MESSAGE it
    is the raw bytes after the command (a memoryview of the frame, valid while the frame is alive),
    and ``metadata``/``payload`` are split from it on first access."""

    __slots__ = ("command", "headers_and_payload", "checksum", "broker_entry_metadata",
                 "_metadata", "_payload_offset", "_metadata_span")

    def __init__(self, command: pb.BaseCommand, headers_and_payload: memoryview | None = None) -> None:
        self.command = command
        self.headers_and_payload = headers_and_payload
        self.checksum: int | None = None
        self.broker_entry_metadata: pb.BrokerEntryMetadata | None = None
        self._metadata: pb.MessageMetadata | None = None
        self._metadata_span = (0, 0)
        self._payload_offset = 0

    @property
    def type(self) -> int:
        return self.command.type

    @property
    def inner(self) -> Any:
        """The command message (``frame.inner.producer_id`` for a SEND)."""
        return c.inner(self.command)

    @property
    def _hp(self) -> memoryview:
        """headers_and_payload of a frame that has them (a payload command: SEND, MESSAGE)."""
        hp = self.headers_and_payload
        assert hp is not None, "a command without payload"
        return hp

    @property
    def metadata(self) -> pb.MessageMetadata:
        if self._metadata is None:
            start, end = self._metadata_span
            md = pb.MessageMetadata()
            try:
                md.MergeFromString(cast(bytes, self._hp[start:end]))  # protobuf reads any buffer, without a copy
            except DecodeError as exc:
                raise MalformedFrame(f"message metadata does not parse: {exc}") from None
            self._metadata = md
        return self._metadata

    @property
    def metadata_bytes(self) -> memoryview:
        start, end = self._metadata_span
        return self._hp[start:end]

    @property
    def payload(self) -> memoryview:
        """The (possibly compressed, possibly batched) payload after the metadata."""
        return self._hp[self._payload_offset:]

    @property
    def stored_bytes(self) -> memoryview:
        """headers_and_payload without broker entry metadata: what a broker stores for a SEND."""
        hp = self._hp
        if hp[:2] == BROKER_ENTRY_METADATA_MAGIC:
            return hp[6 + _U32.unpack_from(hp, 2)[0]:]
        return hp

    def __repr__(self) -> str:
        return f"Frame({c.type_name(self.type)}, payload={self.headers_and_payload is not None})"


def split_headers_and_payload(frame: Frame, verify: bool = True) -> None:
    """Locate broker entry metadata, checksum, metadata and payload in ``frame.headers_and_payload``
    (and check the CRC32C when ``verify``). Raises MalformedFrame / ChecksumMismatch."""
    hp = frame._hp
    size = len(hp)
    pos = 0
    checksum = 0
    try:
        if hp[0:2] == BROKER_ENTRY_METADATA_MAGIC:
            _, bem_size = _HEAD.unpack_from(hp, 0)
            if 6 + bem_size > size:
                raise MalformedFrame("broker entry metadata runs past the frame")
            bem = pb.BrokerEntryMetadata()
            bem.MergeFromString(cast(bytes, hp[6:6 + bem_size]))  # protobuf reads any buffer, without a copy
            frame.broker_entry_metadata = bem
            pos = 6 + bem_size
        crc_start = -1
        if hp[pos:pos + 2] == CHECKSUM_MAGIC:
            _, checksum = _HEAD.unpack_from(hp, pos)
            frame.checksum = checksum
            pos += 6
            crc_start = pos
        (md_size,) = _U32.unpack_from(hp, pos)
    except (struct.error, DecodeError) as exc:
        raise MalformedFrame(f"payload headers are truncated or garbage: {exc}") from None
    pos += 4
    if pos + md_size > size:
        raise MalformedFrame(f"message metadata of {md_size} bytes runs past the frame")
    frame._metadata_span = (pos, pos + md_size)
    frame._payload_offset = pos + md_size
    if verify and crc_start >= 0:
        actual = crc32c(hp[crc_start:])
        if actual != checksum:
            raise ChecksumMismatch(frame, checksum, actual)


class FrameReader:
    """Cuts frames out of a byte stream. ``feed(data)`` appends, ``next_frame()`` returns the next
    complete frame or None when more bytes are needed; ``frames(data)`` does both for a loop.

    After FrameTooLarge / MalformedFrame the reader is poisoned (further calls raise the same error):
    the peer is out of step and the connection should be closed.
    """

    __slots__ = ("_buf", "_pos", "max_frame_size", "verify_checksums", "_failed")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, verify_checksums: bool = True) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.max_frame_size = max_frame_size
        self.verify_checksums = verify_checksums
        self._failed: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    @property
    def needed(self) -> int:
        """Bytes still missing for the frame at the head of the buffer (for its size field first): reading no more
        than this ends a read at a frame's end, so no byte of the next frame is taken in with it."""
        avail = len(self._buf) - self._pos
        if avail < 4:
            return 4 - avail
        total: int = _U32.unpack_from(self._buf, self._pos)[0]
        return max(4 + total - avail, 1)

    def feed(self, data: BytesLike) -> None:
        if self._failed is not None:
            raise self._failed
        buf = self._buf
        if self._pos:
            # Drop consumed bytes before growing: the buffer holds at most one partial frame + data.
            del buf[:self._pos]
            self._pos = 0
        buf += data

    def frames(self, data: BytesLike = b"") -> list[Frame]:
        """Feed ``data`` and return every complete frame. Errors propagate (see the class doc); frames
        completed before the bad one are lost to the caller, so handlers wanting them call next_frame."""
        self.feed(data)
        out = []
        while (frame := self.next_frame()) is not None:
            out.append(frame)
        return out

    def next_frame(self) -> Frame | None:
        if self._failed is not None:
            raise self._failed
        buf = self._buf
        pos = self._pos
        avail = len(buf) - pos
        if avail < 4:
            return None
        (total,) = _U32.unpack_from(buf, pos)
        if total + 4 > self.max_frame_size:
            raise self._fail(FrameTooLarge(total + 4, self.max_frame_size))
        if avail < 4 + total:
            return None
        end = pos + 4 + total
        self._pos = end
        if total < 4:
            raise self._fail(MalformedFrame(f"frame of {total} bytes has no room for a command size"))
        (cmd_size,) = _U32.unpack_from(buf, pos + 4)
        if cmd_size > total - 4:
            raise self._fail(MalformedFrame(f"command size {cmd_size} is over the frame's {total - 4} bytes"))
        # One copy per frame (frames outlive the buffer's next growth); the temporary view dies at once,
        # so the bytearray stays resizable.
        frame_bytes = bytes(memoryview(buf)[pos + 8:end])
        view = memoryview(frame_bytes)
        cmd = pb.BaseCommand()
        try:
            cmd.MergeFromString(cast(bytes, view[:cmd_size]))  # protobuf reads any buffer, without a copy
        except DecodeError as exc:
            raise self._fail(MalformedFrame(f"command does not parse: {exc}")) from None
        if not cmd.HasField("type") or cmd.type not in c.FIELD_BY_TYPE:
            raise UnknownCommand(_raw_type(view[:cmd_size]))
        if cmd_size == total - 4:
            if cmd.type in c.PAYLOAD_TYPES:
                raise self._fail(MalformedFrame(f"{c.type_name(cmd.type)} without metadata and payload"))
            return Frame(cmd)
        if cmd.type not in c.PAYLOAD_TYPES:
            raise self._fail(MalformedFrame(f"{c.type_name(cmd.type)} followed by {total - 4 - cmd_size} bytes"))
        frame = Frame(cmd, view[cmd_size:])
        try:
            split_headers_and_payload(frame, self.verify_checksums)
        except MalformedFrame as exc:
            raise self._fail(exc) from None
        return frame

    def close(self) -> None:
        """The peer closed the stream: raise TruncatedFrame if it stopped inside a frame."""
        if self._failed is None and self.buffered:
            raise TruncatedFrame(f"stream ended inside a frame ({self.buffered} bytes pending)")

    def _fail(self, exc: FrameError) -> FrameError:
        self._failed = exc
        return exc


def _raw_type(cmd_bytes: memoryview) -> int | None:
    try:
        for number, wire, value, _, _ in iter_fields(cmd_bytes):
            if number == 1 and wire == VARINT:
                return value
    except ProtobufError:
        pass
    return None


# ---- encoding --------------------------------------------------------------------------------------


def encode_command(cmd: pb.BaseCommand) -> bytes:
    """A simple frame (no payload)."""
    body = cmd.SerializeToString()
    return _U32x2.pack(len(body) + 4, len(body)) + body


def encode_headers_and_payload(metadata: pb.MessageMetadata | bytes, payload: BytesLike, checksum: bool = True,
                               broker_entry_metadata: pb.BrokerEntryMetadata | bytes | None = None) -> bytes:
    """The bytes after a SEND/MESSAGE command, also the stored form of an entry. ``checksum`` adds the
    0x0e01 CRC32C section every client since protocol v6 sends and verifies."""
    md = metadata if isinstance(metadata, bytes | bytearray) else metadata.SerializeToString()
    tail = _U32.pack(len(md)) + md + bytes(payload)
    parts = []
    if broker_entry_metadata is not None:
        bem = (broker_entry_metadata if isinstance(broker_entry_metadata, bytes | bytearray)
               else broker_entry_metadata.SerializeToString())
        parts.append(_HEAD.pack(0x0E02, len(bem)) + bem)
    if checksum:
        parts.append(_HEAD.pack(0x0E01, crc32c(tail)))
    parts.append(tail)
    return b"".join(parts)


def encode_payload_command(cmd: pb.BaseCommand, headers_and_payload: BytesLike) -> bytes:
    """A SEND or MESSAGE frame around ready-made headers_and_payload (e.g. a stored entry's bytes)."""
    body = cmd.SerializeToString()
    return b"".join((_U32x2.pack(4 + len(body) + len(headers_and_payload), len(body)), body,
                     headers_and_payload))


def encode_message(cmd: pb.BaseCommand, metadata: pb.MessageMetadata | bytes, payload: BytesLike,
                   checksum: bool = True) -> bytes:
    """A SEND or MESSAGE frame from metadata and payload."""
    return encode_payload_command(cmd, encode_headers_and_payload(metadata, payload, checksum))
