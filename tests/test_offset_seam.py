"""ARCHITECTURE.md: only kop/offset/ converts between Kafka offsets and ledger positions. Checked on the source.

Everything above the offset layer talks to a partition through kop/offset/api.py's PartitionLog (position_of,
entry_offsets, offset_of, offset_after, offset_appended_since, entries_from, nth_position_from, read, ...). The
implementation's search internals (`find_position`, `probe`, `last_index_of`), the managed ledger's ordinals
(`ordinal_of`) and the managed ledger behind a partition log (`plog.ml`) are what a module reaches for when it
computes offsets itself; this test fails when a module outside kop/offset/ (and, for the names the managed ledger
owns, kop/managed_ledger/) names one of them.

A few uses that are about the managed ledger itself rather than offsets are listed in ALLOWED, each with its
reason; an entry no longer used fails the test too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KOP = ROOT / "kop"

# Search internals of the partition log and ordinals of the managed ledger: kop/offset/ and kop/managed_ledger/ only.
INTERNALS = {"find_position", "probe", "ordinal_of", "last_index_of"}
INTERNALS_HOME = ("kop/offset/", "kop/managed_ledger/")
# The managed ledger behind a partition log (ManagedPartitionLog.ml, CompactableLog.ml): kop/offset/ only. Inside
# kop/managed_ledger/ an `.ml` is a managed ledger's own (e.g. the rewriter's), not a partition log's.
LEDGER_ATTR = "ml"
LEDGER_HOME = ("kop/offset/", "kop/managed_ledger/")

# (file, enclosing function, attribute) -> why it may stay.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("kop/admin/views.py", "internal_stats", "ml"):
        "Pulsar's internalStats shows the managed ledger itself: its ledgers, sizes, properties, state",
    ("kop/admin/views.py", "partition_damage", "ml"):
        "the ids of the partition's ledgers, to ask the ledger store which of them are damaged",
    ("kop/topics/chores.py", "_newest_entry_time", "ml"):
        "the compaction chore walks ledgers through kop/offset/compaction.py's CompactableLog, which exposes ml",
    ("kop/pulsar/compacted.py", "__init__", "ml"):
        "Pulsar's compaction horizon is a property of the managed ledger (read at open), not an offset conversion",
    ("kop/pulsar/compacted.py", "_run", "ml"):
        "Pulsar's compaction horizon is a property of the managed ledger (written after a compaction)",
}


def _uses(tree: ast.AST) -> list[tuple[int, str, str, str]]:
    """(line, enclosing function or '', attribute, source) for every access to a watched attribute."""
    found: list[tuple[int, str, str, str]] = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else func
            if isinstance(child, ast.Attribute) and (child.attr in INTERNALS or child.attr == LEDGER_ATTR):
                found.append((child.lineno, func, child.attr, ast.unparse(child)))
            visit(child, name)

    visit(tree, "")
    return found


def violations(rel: str, source: str) -> list[str]:
    """What `source` (the file `rel`, relative to the repository root) does against the rule, one line each."""
    out = []
    for line, func, attr, text in _uses(ast.parse(source, rel)):
        home = INTERNALS_HOME if attr in INTERNALS else LEDGER_HOME
        if rel.startswith(home) or (rel, func, attr) in ALLOWED:
            continue
        out.append(f"{rel}:{line} ({func or 'module level'}): {text}")
    return out


def _sources() -> list[tuple[str, str]]:
    return [(p.relative_to(ROOT).as_posix(), p.read_text()) for p in sorted(KOP.rglob("*.py"))]


def test_no_module_outside_kop_offset_converts_offsets_and_positions() -> None:
    found = [v for rel, src in _sources() for v in violations(rel, src)]
    assert not found, (
        "only kop/offset/ converts between offsets and positions (ARCHITECTURE.md); call the PartitionLog "
        "interface of kop/offset/api.py (position_of, entry_offsets, offset_of, offset_after, entries_from, "
        "nth_position_from, ...) instead of:\n  " + "\n  ".join(found))


def test_every_allowed_use_is_still_there() -> None:
    used = {(rel, func, attr) for rel, src in _sources() for _, func, attr, _ in _uses(ast.parse(src, rel))}
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"remove these from ALLOWED, nothing uses them any more: {stale}"


def test_the_check_sees_what_it_should_and_nothing_else() -> None:
    bad = (
        "async def seek(plog, ml, pos):\n"
        "    await plog.find_position(3)\n"
        "    meta = await sub.plog.probe(pos.ledger_id, pos.entry_id)\n"
        "    n = plog.ml.number_of_entries - ml.ordinal_of(pos)\n"
        "    await self.log.last_index_of(1, 2)\n"
    )
    found = violations("kop/pulsar/example.py", bad)
    assert [v.split(": ", 1)[1] for v in found] == [
        "plog.find_position", "sub.plog.probe", "plog.ml", "ml.ordinal_of", "self.log.last_index_of"]
    assert all("(seek)" in v for v in found)
    # The interface's own names, other objects' look-alikes, and the homes of the internals are fine.
    good = (
        "async def seek(plog, pos, store):\n"
        "    offset = await plog.offset_of(pos)\n"
        "    where = await plog.position_of(offset)\n"
        "    n = await plog.entries_from(offset)\n"
        "    problem = store.probe_writable()\n"
        "    html = page.mlx\n"
    )
    assert violations("kop/pulsar/example.py", good) == []
    assert violations("kop/offset/partition_log.py", bad) == []
    assert violations("kop/managed_ledger/ledger.py", "def f(self):\n    return self.ml.ordinal_of(p)\n") == []


def test_no_type_ignore_in_the_pulsar_handler() -> None:
    """kop/pulsar/ speaks to the partition through its interface, typed: nothing to silence (issue #21)."""
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((KOP / "pulsar").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if "type: ignore" in line]
    assert not found, f"`type: ignore` in kop/pulsar/: {found}"
