"""The bookie wire protocol, version 2 ("PreV3", the binary protocol Pulsar's brokers use), client side.

Facts from BookKeeper's wire protocol (docs/bookkeeper.md, How the client works), restated:

* Every frame in both directions is ``u32 length · body``; all integers are big-endian.
* A request body starts with ``u32 (version << 24) | (opcode << 16) | flags``, version 2.
  ADD:  header · masterKey(20) · entry (below).
  READ: header · ledgerId(8) · entryId(8) · [masterKey(20) only with FLAG_DO_FENCING].
* A response body is ``header(4) · rc(4) · ledgerId(8) · entryId(8)``, followed for an OK READ by the
  entry. v2 has no request ids: responses are matched by (opcode, ledger id, entry id), first in first
  out per key (the caller keeps a FIFO per key).
* READ of entry -1 returns the last entry the bookie holds for the ledger (the response echoes -1; the
  real id is inside the entry); with FLAG_DO_FENCING it also fences the ledger on that bookie: later
  normal ADDs get EFENCED, recovery ADDs (FLAG_RECOVERY_ADD) are still accepted.
* Entry = ``ledgerId(8) · entryId(8) · lastAddConfirmed(8) · length(8) · digest · payload``, where
  length is the cumulative ledger length including this entry and the digest (CRC32C here: 4 bytes, a
  big-endian int) covers the 32-byte header then the payload.
* masterKey = SHA1(b"ledger" + password): the bookie keeps the first key it sees for a ledger and refuses
  ADDs / fencing READs with another (EUA).

This module is sans-IO: bytes in, bytes out. The connection (client.py) matches responses to callbacks.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from fastcrc import crc32 as _crc32

from kop.storage.api import Buffer, StorageError

_crc32c = _crc32.iscsi

PROTOCOL_VERSION = 2

# opcodes
ADD_ENTRY = 1
READ_ENTRY = 2

# request flags
FLAG_NONE = 0
FLAG_DO_FENCING = 0x0001
FLAG_RECOVERY_ADD = 0x0002
FLAG_HIGH_PRIORITY = 0x0004

# v2 return codes
EOK = 0
ENOLEDGER = 1
ENOENTRY = 2
EBADREQ = 100
EIO = 101
EUA = 102
EBADVERSION = 103
EFENCED = 104
EREADONLY = 105
ETOOMANYREQUESTS = 106
EUNKNOWNLEDGERSTATE = 107
# Client-side codes (never on the wire): the request got no answer.
ECONNECTION = -100  # connection failed or closed before the answer
ETIMEOUT = -101  # no answer within the request timeout

RC_NAMES = {
    EOK: "EOK", ENOLEDGER: "ENOLEDGER", ENOENTRY: "ENOENTRY", EBADREQ: "EBADREQ", EIO: "EIO", EUA: "EUA",
    EBADVERSION: "EBADVERSION", EFENCED: "EFENCED", EREADONLY: "EREADONLY",
    ETOOMANYREQUESTS: "ETOOMANYREQUESTS", EUNKNOWNLEDGERSTATE: "EUNKNOWNLEDGERSTATE",
    ECONNECTION: "connection lost", ETIMEOUT: "timed out",
}

LAST_ADD_CONFIRMED = -1  # READ of this entry id = "your last entry" (LAC read / fencing)
MASTER_KEY_SIZE = 20
ENTRY_HEADER_SIZE = 32
CRC32C_DIGEST_SIZE = 4
ENTRY_OVERHEAD = ENTRY_HEADER_SIZE + CRC32C_DIGEST_SIZE

DIGEST_CRC32 = 1
DIGEST_HMAC = 2
DIGEST_CRC32C = 3
DIGEST_DUMMY = 4

_U32 = struct.Struct(">I")
_ADD_HEAD = struct.Struct(">II20sqqqqI")  # frame length, header, masterKey, entry header, crc32c
_READ = struct.Struct(">IIqq")  # frame length, header, ledger id, entry id
_READ_FENCE = struct.Struct(">IIqq20s")
_RESPONSE = struct.Struct(">IIqq")  # header, rc, ledger id, entry id (after the frame length)
_ENTRY_HEAD = struct.Struct(">qqqq")
_ENTRY_HEAD_CRC = struct.Struct(">qqqqI")
RESPONSE_SIZE = _RESPONSE.size  # 24


class DigestError(StorageError):
    """An entry whose digest or ids do not match: corrupt, or read with the wrong digest type."""


def rc_name(rc: int) -> str:
    return RC_NAMES.get(rc, str(rc))


def master_key(password: bytes) -> bytes:
    """The 20-byte key bookies check on ADDs and fencing READs: SHA1(b"ledger" + password)."""
    return hashlib.sha1(b"ledger" + password).digest()


def packet_header(opcode: int, flags: int = FLAG_NONE) -> int:
    return (PROTOCOL_VERSION << 24) | (opcode << 16) | flags


def parts_crc32c(parts: Sequence[Buffer], crc: int = 0) -> int:
    for p in parts:
        crc = _crc32c(p, crc)
    return crc


def encode_add(key: bytes, ledger_id: int, entry_id: int, lac: int, length: int,
               parts: Sequence[Buffer], payload_size: int, flags: int = FLAG_NONE) -> bytes:
    """The frame prefix of an ADD: everything up to the payload, which the caller sends after it
    (payload `parts`, unchanged, so a payload is never copied to be framed). The CRC32C covers the
    32-byte entry header and the payload."""
    head = _ENTRY_HEAD.pack(ledger_id, entry_id, lac, length)
    crc = parts_crc32c(parts, _crc32c(head))
    frame_len = 4 + MASTER_KEY_SIZE + ENTRY_OVERHEAD + payload_size
    return _ADD_HEAD.pack(frame_len, packet_header(ADD_ENTRY, flags), key, ledger_id, entry_id, lac, length, crc)


def encode_read(ledger_id: int, entry_id: int, *, fence_key: bytes | None = None,
                flags: int = FLAG_NONE) -> bytes:
    """A READ frame; with fence_key, a fencing READ (FLAG_DO_FENCING + masterKey)."""
    if fence_key is None:
        return _READ.pack(20, packet_header(READ_ENTRY, flags), ledger_id, entry_id)
    return _READ_FENCE.pack(40, packet_header(READ_ENTRY, flags | FLAG_DO_FENCING), ledger_id, entry_id,
                            fence_key)


def decode_response(body: memoryview) -> tuple[int, int, int, int, memoryview]:
    """(opcode, rc, ledger id, entry id, rest) of one response body (without its frame length)."""
    if len(body) < RESPONSE_SIZE:
        raise StorageError(f"bookie response of {len(body)} bytes is too short")
    header, rc, ledger_id, entry_id = _RESPONSE.unpack_from(body, 0)
    return (header >> 16) & 0xFF, rc, ledger_id, entry_id, body[RESPONSE_SIZE:]


class Entry:
    """A decoded, verified entry: header fields and the payload (a view into the response frame)."""

    __slots__ = ("ledger_id", "entry_id", "lac", "length", "payload")

    def __init__(self, ledger_id: int, entry_id: int, lac: int, length: int, payload: memoryview) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.lac = lac
        self.length = length
        self.payload = payload


def decode_entry(data: memoryview, ledger_id: int, entry_id: int | None) -> Entry:
    """Verify a CRC32C entry (digest, ledger id, and entry id unless None, as for LAC reads) and split
    it. Raises DigestError on any mismatch."""
    if len(data) < ENTRY_OVERHEAD:
        raise DigestError(f"ledger {ledger_id}: entry of {len(data)} bytes is shorter than its header")
    lid, eid, lac, length, crc = _ENTRY_HEAD_CRC.unpack_from(data, 0)
    payload = data[ENTRY_OVERHEAD:]
    if _crc32c(payload, _crc32c(data[:ENTRY_HEADER_SIZE])) != crc:
        raise DigestError(f"ledger {ledger_id}: digest mismatch in entry {eid}")
    if lid != ledger_id or (entry_id is not None and eid != entry_id):
        raise DigestError(f"asked for {ledger_id}/{entry_id}, the bookie sent {lid}/{eid}")
    return Entry(lid, eid, lac, length, payload)


def frame_length(buf: Buffer, pos: int) -> int:
    return _U32.unpack_from(buf, pos)[0]
