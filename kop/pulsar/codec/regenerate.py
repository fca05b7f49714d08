"""Regenerate pulsar_api_pb2.py and its typed stub pulsar_api_pb2.pyi from pulsar_api.proto:
``python -m kop.pulsar.codec.regenerate``.

The generated module is committed so the broker needs only the ``protobuf`` runtime, not protoc;
grpcio-tools (a test extra) brings protoc, mypy-protobuf (a test extra) its ``protoc-gen-mypy`` plugin
that writes the stub the type check reads, and tests/test_pulsar_codec.py checks the committed module
and stub still match the .proto.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

# grpcio-tools is a dev-time tool (the test extra), not a runtime dependency: nothing in the broker imports this module.
from grpc_tools import protoc

HERE = Path(__file__).resolve().parent
PROTO = "pulsar_api.proto"


def _mypy_plugin() -> str:
    """The path of mypy-protobuf's protoc plugin (installed next to this Python, or on PATH)."""
    beside = Path(sys.executable).parent / "protoc-gen-mypy"
    found = str(beside) if beside.exists() else shutil.which("protoc-gen-mypy")
    if found is None:
        raise RuntimeError("protoc-gen-mypy not found: pip install mypy-protobuf (in the test extra)")
    return found


def compile_to(out_dir: Path) -> Path:
    """Compile the .proto into out_dir (the module and its .pyi stub); return the module's path."""
    rc = protoc.main(["protoc", f"-I{HERE}", f"--plugin=protoc-gen-mypy={_mypy_plugin()}",
                      f"--python_out={out_dir}", f"--mypy_out={out_dir}", str(HERE / PROTO)])
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}")
    return out_dir / "pulsar_api_pb2.py"


def main() -> int:
    path = compile_to(HERE)
    print(f"wrote {path} and {path.with_suffix('.pyi')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
