"""The codec registry and framing: headers, request decoding, response encoding.

Message classes are generated for every request/response schema at import (cheap); the
per-version decode/encode functions are generated lazily on first use and cached, so a broker
only pays for the versions its clients actually speak.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from .codegen import (
    Decoder,
    Encoded,
    Encoder,
    make_decoder,
    make_encoder,
    make_struct_encoder,
    skip_tag_buffer,
)
from .compression import BytesLike
from .errors import DecodeError, EncodeError, UnsupportedVersionError
from .model import MessageModel, Struct
from .schema import MessageSpec, load_all

API_VERSIONS_KEY = 18

_I32 = struct.Struct(">i")
_H16 = struct.Struct(">h")
_HEADER_FIXED = struct.Struct(">hhi")  # api key, api version, correlation id
_HEADER_V1 = struct.Struct(">hhih")  # ... plus the client id length


@dataclass(frozen=True, slots=True)
class ApiInfo:
    """What the schemas say about one api key."""

    key: int
    name: str  # e.g. "Produce"
    min_version: int  # lowest valid request version per the schema
    max_version: int  # highest valid request version per the schema
    request_class: type[Struct]
    response_class: type[Struct]
    request_spec: MessageSpec
    response_spec: MessageSpec

    def flexible(self, version: int) -> bool:
        """Whether ``version`` uses the flexible (compact + tagged fields) encoding.

        Also answers for versions above ``max_version``: flexibility is an open range ("9+"), which
        is what header parsing needs for requests newer than we know.
        """
        return version in self.request_spec.flexible_versions

    def valid(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


MODELS: dict[str, MessageModel] = {}
API_KEYS: dict[int, ApiInfo] = {}


def _build_registry() -> None:
    specs = load_all()
    for spec in specs.values():
        if spec.type in ("request", "response", "data"):
            MODELS[spec.name] = MessageModel(spec)
    for spec in specs.values():
        if spec.type != "request" or spec.api_key is None:
            continue
        base = spec.name.removesuffix("Request")
        response = specs[base + "Response"]
        API_KEYS[spec.api_key] = ApiInfo(
            key=spec.api_key,
            name=base,
            min_version=spec.valid_versions.low,
            max_version=spec.valid_versions.high,
            request_class=MODELS[spec.name].root,
            response_class=MODELS[response.name].root,
            request_spec=spec,
            response_spec=response,
        )


_build_registry()

#: api key -> (low, high) flexible request versions, for the header fast path.
_REQUEST_FLEXIBLE: dict[int, tuple[int, int]] = {
    key: (info.request_spec.flexible_versions.low, info.request_spec.flexible_versions.high)
    for key, info in API_KEYS.items()
}


def api_info(api_key: int) -> ApiInfo:
    """The ApiInfo of ``api_key``; KeyError when the schemas do not know it."""
    return API_KEYS[api_key]


def message_class(name: str) -> type[Struct]:
    """A generated top-level class by schema name, e.g. ``message_class("FetchResponse")``."""
    return MODELS[name].root


# ---------------------------------------------------------------------------------------------
# Lazily generated per-version functions


_DECODERS: dict[tuple[str, int], Decoder] = {}
_ENCODERS: dict[tuple[str, int], Encoder] = {}
_REQUEST_DECODERS: dict[tuple[int, int], Decoder] = {}
_RESPONSE_ENCODERS: dict[tuple[int, int], Encoder] = {}


def _check_version(model: MessageModel, version: int) -> None:
    if version not in model.spec.valid_versions:
        raise UnsupportedVersionError(
            f"{model.spec.name} v{version} is outside the valid versions "
            f"{model.spec.valid_versions.low}-{model.spec.valid_versions.high}")


def decoder(name: str, version: int) -> Decoder:
    """``decode(data: memoryview, pos: int) -> (obj, pos)`` for a schema name and version."""
    fn = _DECODERS.get((name, version))
    if fn is None:
        model = MODELS[name]
        _check_version(model, version)
        fn = _DECODERS[(name, version)] = make_decoder(model, version)
    return fn


def encoder(name: str, version: int) -> Encoder:
    """``encode(obj, cur: list, parts: list) -> None`` for a schema name and version."""
    fn = _ENCODERS.get((name, version))
    if fn is None:
        model = MODELS[name]
        _check_version(model, version)
        fn = _ENCODERS[(name, version)] = make_encoder(model, version)
    return fn


_STRUCT_ENCODERS: dict[tuple[str, str, int], Encoder] = {}


def encode_struct(obj: Struct, version: int) -> Encoded:
    """One nested struct (e.g. a MetadataResponseTopic) encoded alone at ``version`` of its message, for
    use as a pre-encoded array element of that message at the same version (see ``codegen``)."""
    name = type(obj).__name__
    key = (obj._MESSAGE, name, version)
    fn = _STRUCT_ENCODERS.get(key)
    if fn is None:
        model = MODELS[obj._MESSAGE]
        _check_version(model, version)
        if name not in model.fields_of or name == obj._MESSAGE:
            raise ValueError(f"{name} is not a nested struct of {obj._MESSAGE}")
        fn = _STRUCT_ENCODERS[key] = make_struct_encoder(model, version, name)
    cur: list[bytes] = []
    parts: list[BytesLike] = []
    try:
        fn(obj, cur, parts)
    except _ENCODE_ERRORS as exc:
        raise _encode_error(obj._MESSAGE, version, obj, exc) from exc
    parts.append(b"".join(cur))
    return Encoded(b"".join(parts))


def _request_decoder(api_key: int, version: int) -> Decoder:
    info = API_KEYS.get(api_key)
    if info is None:
        raise UnsupportedVersionError(f"unknown api key {api_key}")
    fn = _REQUEST_DECODERS[(api_key, version)] = decoder(info.request_spec.name, version)
    return fn


def _response_encoder(api_key: int, version: int) -> Encoder:
    info = API_KEYS.get(api_key)
    if info is None:
        raise UnsupportedVersionError(f"unknown api key {api_key}")
    fn = _RESPONSE_ENCODERS[(api_key, version)] = encoder(info.response_spec.name, version)
    return fn


def _as_view(data: BytesLike) -> memoryview:
    view = data if type(data) is memoryview else memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


_ENCODE_ERRORS = (struct.error, AttributeError, TypeError, ValueError, OverflowError)


def _encode_error(name: str, version: int, body: object, exc: Exception) -> EncodeError:
    if not isinstance(body, Struct) or body._MESSAGE != name:
        return EncodeError(f"{name} v{version}: expected a {name} object, got {type(body).__qualname__}")
    return EncodeError(f"{name} v{version}: a field has a value of the wrong type or range: {exc}")


def precompile(api_keys: Iterable[int] | None = None) -> int:
    """Generate the request decoders and response encoders of every valid version up front.

    Optional: codecs are otherwise generated on first use (~0.3 ms each). Returns how many.
    """
    count = 0
    for key in API_KEYS if api_keys is None else api_keys:
        info = API_KEYS[key]
        for version in range(info.min_version, info.max_version + 1):
            _request_decoder(key, version)
            _response_encoder(key, version)
            count += 2
    return count


def encode_message(obj: Struct, version: int) -> bytes:
    """Encode one message body (no size prefix, no header) to bytes."""
    cur: list[bytes] = []
    parts: list[BytesLike] = []
    try:
        encoder(obj._MESSAGE, version)(obj, cur, parts)
    except _ENCODE_ERRORS as exc:
        raise _encode_error(obj._MESSAGE, version, obj, exc) from exc
    parts.append(b"".join(cur))
    return b"".join(parts)


def decode_message(name: str, version: int, data: BytesLike, offset: int = 0) -> Struct:
    """Decode one message body by schema name (e.g. "MetadataResponse") starting at ``offset``."""
    obj, _pos = decoder(name, version)(_as_view(data), offset)
    return obj


# ---------------------------------------------------------------------------------------------
# Server side: request header + body in, response frame out


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def decode_request_header(frame: BytesLike) -> tuple[RequestHeader, int]:
    """Parse the request header at the start of ``frame`` (the bytes after the size prefix).

    Returns the header and the offset where the body starts. Header v2 (with a tag buffer) is
    used when the api's request version is flexible, else v1. ``client_id`` is always a classic
    int16-length nullable string. For an unknown api key the header is still returned (as v1,
    best effort) so the broker can answer with an error; only a frame shorter than the fixed
    8 bytes raises DecodeError, while a truncated client id or tag buffer of a known api does.
    """
    view = frame if type(frame) is memoryview and frame.format == "B" else _as_view(frame)
    size = len(view)
    if size >= 10:  # fast path: a well-formed header whose tag buffer (if any) is empty
        api_key, api_version, correlation_id, n = _HEADER_V1.unpack_from(view, 0)
        cid_end = 10 + n if n > 0 else 10
        if cid_end <= size:
            flexible = _REQUEST_FLEXIBLE.get(api_key)
            tagged = flexible is not None and flexible[0] <= api_version <= flexible[1]
            if not tagged or (cid_end < size and view[cid_end] == 0):
                try:
                    client_id = str(view[10:cid_end], "utf-8") if n >= 0 else None
                except UnicodeDecodeError:
                    pass  # the slow path reports it
                else:
                    return RequestHeader(api_key, api_version, correlation_id, client_id), cid_end + tagged
    return _decode_request_header_slow(view)


def _decode_request_header_slow(view: memoryview) -> tuple[RequestHeader, int]:
    size = len(view)
    if size < 8:
        raise DecodeError(f"request header needs at least 8 bytes, got {size}")
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(view, 0)
    info = API_KEYS.get(api_key)
    client_id: str | None = None
    pos = 8
    try:
        if size < 10:
            raise DecodeError("request header truncated before client_id")
        (n,) = _H16.unpack_from(view, 8)
        pos = 10
        if n >= 0:
            end = pos + n
            if end > size:
                raise DecodeError("request header truncated inside client_id")
            client_id = str(view[pos:end], "utf-8")
            pos = end
        if info is not None and info.flexible(api_version):
            pos = skip_tag_buffer(view, pos)
    except (DecodeError, IndexError, UnicodeDecodeError) as exc:
        if info is not None and info.valid(api_version):
            raise DecodeError(f"malformed request header: {exc}") from None
        # Unknown api or version: the broker only needs key/version/correlation id to answer.
        return RequestHeader(api_key, api_version, correlation_id, client_id), min(pos, size)
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def decode_request(api_key: int, version: int, frame: BytesLike, offset: int) -> Struct:
    """Decode a request body that starts at ``offset`` of ``frame``.

    Raises UnsupportedVersionError (a DecodeError) for an unknown api key or a version outside
    the schema's valid range, and DecodeError for malformed bytes.
    """
    fn = _REQUEST_DECODERS.get((api_key, version)) or _request_decoder(api_key, version)
    view = frame if type(frame) is memoryview and frame.format == "B" else _as_view(frame)
    obj, _pos = fn(view, offset)
    return obj


#: keep copying the size prefix into the first chunk below this size; above it, add a 4-byte part.
_PREFIX_COPY_LIMIT = 64 * 1024


def encode_response(api_key: int, version: int, correlation_id: int, body: Struct) -> list[BytesLike]:
    """The complete response frame as a list of buffers for ``transport.writelines``.

    Includes the 4-byte size prefix and the response header (v1 with an empty tag buffer when the
    version is flexible, v0 otherwise; ApiVersions always v0 because clients parse its header
    before they know the negotiated version). Record blobs are included by reference.
    """
    fn = _RESPONSE_ENCODERS.get((api_key, version)) or _response_encoder(api_key, version)
    if api_key != API_VERSIONS_KEY and API_KEYS[api_key].flexible(version):
        head = _I32.pack(correlation_id) + b"\x00"
    else:
        head = _I32.pack(correlation_id)
    cur: list[bytes] = [head]
    parts: list[BytesLike] = []
    try:
        fn(body, cur, parts)
    except _ENCODE_ERRORS as exc:
        raise _encode_error(API_KEYS[api_key].response_spec.name, version, body, exc) from exc
    parts.append(b"".join(cur))
    total = sum(map(len, parts))
    first = parts[0]
    if len(first) <= _PREFIX_COPY_LIMIT:
        parts[0] = _I32.pack(total) + first
    else:
        parts.insert(0, _I32.pack(total))
    return parts


# ---------------------------------------------------------------------------------------------
# Client side helpers (tests, tools)


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: Struct) -> bytes:
    """A complete request frame (size prefix, header v1/v2, body) as bytes."""
    info = api_info(api_key)
    if client_id is None:
        cid = b"\xff\xff"
    else:
        raw = client_id.encode()
        cid = _H16.pack(len(raw)) + raw
    head = struct.pack(">hhi", api_key, version, correlation_id) + cid
    if info.flexible(version):
        head += b"\x00"
    cur: list[bytes] = [head]
    parts: list[BytesLike] = []
    try:
        encoder(info.request_spec.name, version)(body, cur, parts)
    except _ENCODE_ERRORS as exc:
        raise _encode_error(info.request_spec.name, version, body, exc) from exc
    parts.append(b"".join(cur))
    payload = b"".join(parts)
    return _I32.pack(len(payload)) + payload


def decode_response(api_key: int, version: int, frame: BytesLike) -> tuple[int, Struct]:
    """Decode a response frame (without its size prefix): ``(correlation_id, body)``.

    Like Kafka clients, an ApiVersions response whose error code is non-zero is decoded as v0,
    because a broker answers an unsupported ApiVersions version with a v0 body.
    """
    info = api_info(api_key)
    view = _as_view(frame)
    if len(view) < 4:
        raise DecodeError("response header truncated")
    (correlation_id,) = _I32.unpack_from(view, 0)
    pos = 4
    if api_key != API_VERSIONS_KEY and info.flexible(version):
        try:
            pos = skip_tag_buffer(view, pos)
        except IndexError:
            raise DecodeError("response header truncated") from None
    if api_key == API_VERSIONS_KEY and version > 0 and len(view) >= pos + 2:
        (error_code,) = _H16.unpack_from(view, pos)
        if error_code != 0:
            version = 0
    obj, _pos = decoder(info.response_spec.name, version)(view, pos)
    return correlation_id, obj
