"""Sans-IO Kafka wire-protocol codec: bytes in, typed objects out, and back.

No sockets, no storage. Message classes and codecs are generated from Kafka's own JSON schemas
(loaded at runtime from the installed kafka-python distribution). The names exported here are the
contract the broker is written against; see ``codec`` for the framing rules.
"""

from .codec import (
    API_KEYS,
    ApiInfo,
    Encoded,
    RequestHeader,
    api_info,
    decode_message,
    decode_request,
    decode_request_header,
    decode_response,
    decoder,
    encode_message,
    encode_request,
    encode_response,
    encode_struct,
    encoder,
    message_class,
    precompile,
)
from .errors import DecodeError, EncodeError, ErrorCode, UnsupportedVersionError
from .model import ZERO_UUID, Struct

__all__ = [
    "API_KEYS",
    "ApiInfo",
    "DecodeError",
    "EncodeError",
    "Encoded",
    "ErrorCode",
    "RequestHeader",
    "Struct",
    "UnsupportedVersionError",
    "ZERO_UUID",
    "api_info",
    "decode_message",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "decoder",
    "encode_message",
    "encode_request",
    "encode_response",
    "encode_struct",
    "encoder",
    "message_class",
    "precompile",
]
