"""Regenerate pulsar_api_pb2.py from pulsar_api.proto: ``python -m kop.pulsar.codec.regenerate``.

The generated module is committed so the broker needs only the ``protobuf`` runtime, not protoc;
grpcio-tools (a test extra) brings protoc, and tests/test_pulsar_codec.py checks the committed module
still matches the .proto.
"""

from __future__ import annotations

import sys
from pathlib import Path

# grpcio-tools is a dev-time tool (the test extra), not a runtime dependency: nothing in the broker imports this module.
from grpc_tools import protoc

HERE = Path(__file__).resolve().parent
PROTO = "pulsar_api.proto"


def compile_to(out_dir: Path) -> Path:
    """Compile the .proto into out_dir and return the generated module's path."""
    rc = protoc.main(["protoc", f"-I{HERE}", f"--python_out={out_dir}", str(HERE / PROTO)])
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}")
    return out_dir / "pulsar_api_pb2.py"


def main() -> int:
    path = compile_to(HERE)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
