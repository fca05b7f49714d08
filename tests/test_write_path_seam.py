"""One write path (ARCHITECTURE.md, issue 21): nothing appends to a partition log except through the partition
seam, checked on the source with ast, like the layer rule (tests/test_architecture_layers.py).

Every append - Kafka Produce, Pulsar SEND, the coordinators' internal topics, WriteTxnMarkers - goes through
the seam, which applies the topic's write rules (size, compaction keys, timestamp type and bounds, compression)
and the producer and transaction state once. A handler or coordinator that appends to the partition log itself
bypasses them for its protocol. The practical rule, per call:

* `append_nowait(...)` and `append_entry_nowait(...)` - the partition log's own - called on anything, and
* `X.append(...)` and `X.write_txn_marker(...)` - names the seam (kop.topics.partition.Partition) shares with
  the log - where X is a name or attribute named `plog`, `log`, `partition_log` or ending in `_log` (a
  `list.append` on any other name, or `seam.write_txn_marker`, is fine),

are allowed only in the seam's own layers, kop/topics/ and kop/offset/, and in the layers below them,
kop/managed_ledger/ and kop/storage/, whose `append_nowait` is a ledger handle's (entries, not record batches:
below the seam, not around it). Everywhere else under kop/ such a call is a finding, reported with file:line.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KOP = ROOT / "kop"

# The seam's layers and the ones below it (see the module docstring).
ALLOWED = ("topics", "offset", "managed_ledger", "storage")
APPEND_METHODS = {"append_nowait", "append_entry_nowait"}  # the log's alone
SHARED_METHODS = {"append", "write_txn_marker"}  # the seam's too: a finding on a partition log only
LOG_NAMES = {"plog", "log", "partition_log"}


def _receiver_name(node: ast.expr) -> str | None:
    """The name a method is called on: `plog` for plog.append, `partition_log` for self.partition_log.append."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def is_log_name(name: str | None) -> bool:
    return name is not None and (name in LOG_NAMES or name.endswith("_log"))


def appends_in(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, call text) of every partition-log append in `source`, by the rule above."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        method = node.func.attr
        receiver = _receiver_name(node.func.value)
        if method in APPEND_METHODS or (method in SHARED_METHODS and is_log_name(receiver)):
            found.append((node.lineno, f"{receiver or '<expr>'}.{method}(...)"))
    return found


def outside_the_seam() -> list[str]:
    """'kop/x/y.py:LINE: receiver.method(...)' for every append outside the allowed layers."""
    out: list[str] = []
    for path in sorted(KOP.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if len(rel.parts) > 2 and rel.parts[1] in ALLOWED:
            continue
        for line, call in appends_in(path.read_text(), str(rel)):
            out.append(f"{rel}:{line}: {call}")
    return out


def test_the_rule_finds_partition_log_appends_and_ignores_lists() -> None:
    """The detector itself, on a fixed snippet."""
    src = """
async def f(self, plog, records, topics):
    plog.append_nowait(b, 0, 1)
    self.state.plog.append_entry_nowait(b, 0, 1)
    await plog.write_txn_marker(1, 0, True, 0)
    await plog.append(b, 0, 1)
    await self.partition_log.append(b, 0, 1)
    await self._offsets_log.append(b, 0, 1)
    await log.append(b)
    records.append(1)
    topics.append(x)
    self.items.append(2)
    catalog.append(3)
    await seam.write_txn_marker(1, 0, True, 0)
    await seam.append(b)
"""
    assert [line for line, _ in appends_in(src)] == [3, 4, 5, 6, 7, 8, 9]
    assert appends_in(src)[0][1] == "plog.append_nowait(...)"
    assert appends_in(src)[4][1] == "partition_log.append(...)"


def test_only_the_seam_appends_to_a_partition_log() -> None:
    found = outside_the_seam()
    assert not found, ("appends to a partition log outside the partition seam (kop/topics/, kop/offset/); go "
                       "through the seam so that the topic's write rules apply:\n  " + "\n  ".join(found))
