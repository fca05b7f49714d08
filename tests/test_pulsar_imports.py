"""kop/pulsar/ has no import cycle at run time and no import inside a function (issue #21).

The module graph is derived with ast from every module under kop/pulsar/ (kop/pulsar/codec/ included): an arrow
A -> B for each import A runs when it is loaded - statements at module level, those in module-level `try:` and
`if` blocks too, but not those under `if TYPE_CHECKING:`, which only the type checker follows (test_architecture_
layers.py counts them: a type-only import is still an arrow between layers, but it cannot make a cycle at run
time). A cycle means a module sees another half-initialized depending on which is imported first; the cure is to
move the shared code down into a module both can import, not to hide the import inside a function - which is why
function-local imports are refused as well: they are how cycles were hidden (the command modules registering
themselves when the handler started, kop/pulsar/subscriptions.py importing kop/pulsar/consume.py inside a function).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.graphs import cycles

ROOT = Path(__file__).resolve().parent.parent
PULSAR = ROOT / "kop" / "pulsar"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(package_dir: Path, root: Path) -> dict[str, Path]:
    return {_module_name(p, root): p for p in sorted(package_dir.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_time_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when loaded: its top-level statements, descending into module-level compound
    statements (try, if, with, ...) except `if TYPE_CHECKING:` bodies, never into functions or classes' methods."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                out += _run_time_imports(node.body)
            out += _run_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                out += _run_time_imports(block)
        elif isinstance(node, (ast.With, ast.ClassDef, ast.For, ast.While)):
            out += _run_time_imports(node.body)
    return out


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_pkg: bool, known: set[str]) -> set[str]:
    """The known modules an import statement loads: the module named, and each imported name that is a
    submodule (`from kop.pulsar import consume`)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    if node.level:
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        name = ".".join(base + ([node.module] if node.module else []))
    else:
        name = node.module or ""
    out = {name} if name in known else set()
    out |= {f"{name}.{a.name}" for a in node.names if f"{name}.{a.name}" in known}
    return out


def import_graph(package_dir: Path, root: Path) -> dict[str, dict[str, int]]:
    """module -> module it imports at run time -> the line of the import."""
    mods = _modules(package_dir, root)
    known = set(mods)
    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        for node in _run_time_imports(tree.body):
            for target in _targets(node, mod, is_pkg, known):
                # A package being loaded is already in sys.modules when its submodules import it.
                if target != mod and not mod.startswith(target + "."):
                    graph[mod].setdefault(target, node.lineno)
    return graph


def function_local_imports(package_dir: Path, root: Path) -> list[str]:
    """'path:line module' of every import inside a function (or lambda) body."""
    out = []
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    out.append(f"{path.relative_to(root)}:{node.lineno} {', '.join(a.name for a in node.names)}")
                elif isinstance(node, ast.ImportFrom):
                    out.append(f"{path.relative_to(root)}:{node.lineno} {'.' * node.level}{node.module or ''}")
    return sorted(set(out))


def test_kop_pulsar_has_no_import_cycle() -> None:
    found = cycles(import_graph(PULSAR, ROOT))
    assert not found, "import cycles inside kop/pulsar/ (move the shared code down):\n" + "\n".join(
        " -> ".join(c) for c in found)


def test_kop_pulsar_imports_nothing_inside_functions() -> None:
    found = function_local_imports(PULSAR, ROOT)
    assert not found, "imports inside functions in kop/pulsar/ (import at module level):\n" + "\n".join(found)


def test_the_graph_is_derived_from_real_imports() -> None:
    """Guards the checker on the real tree: arrows known to exist are found, type-only ones are not."""
    graph = import_graph(PULSAR, ROOT)
    assert "kop.pulsar.commands_table" in graph["kop.pulsar.handler"]
    assert "kop.pulsar.consume" in graph["kop.pulsar.commands_table"]  # `from kop.pulsar import consume`
    assert "kop.pulsar.codec.batch" in graph["kop.pulsar.convert"]  # `from .codec import batch`
    assert "kop.pulsar.connection" in graph["kop.pulsar.consume"]
    assert "kop.pulsar.handler" not in graph["kop.pulsar.connection"]  # only under TYPE_CHECKING


def test_the_checks_see_a_cycle_and_a_local_import(tmp_path: Path) -> None:
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from p import b\n")
    (pkg / "b.py").write_text("try:\n    from . import c\nexcept ImportError:\n    c = None\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import p.a\n"
        "if TYPE_CHECKING:\n    from p import d\n"
        "def f():\n    import p.d\n")
    (pkg / "d.py").write_text("from p import c\n")
    graph = import_graph(pkg, tmp_path)
    assert cycles(graph) == [["p.a", "p.b", "p.c", "p.a"]]  # c -> d only under TYPE_CHECKING and in a function
    assert function_local_imports(pkg, tmp_path) == ["p/c.py:6 p.d"]
