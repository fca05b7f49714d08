"""The import rule of docs/architecture.md, checked on the source: imports only run downward.

The package import graph is derived with ast from every module under kop/ - imports inside functions and
under `if TYPE_CHECKING:` included, since a type-only import is still an arrow between layers. A unit is a
package directly under kop/ (kop/topics/, kop/kafka/, ...) or a top-level module (kop/config.py, ...). The
layer order is the `layers` block of docs/architecture.md, top to bottom; units on one line are siblings
and may not import each other.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.graphs import cycles

ROOT = Path(__file__).resolve().parent.parent
KOP = ROOT / "kop"
DOC = ROOT / "docs" / "architecture.md"


def doc_layers() -> list[list[str]]:
    """The layers as the doc draws them, top first."""
    m = re.search(r"^```layers\n(.*?)^```", DOC.read_text(), re.S | re.M)
    assert m, "docs/architecture.md has no ```layers block"
    return [line.split() for line in m.group(1).splitlines() if line.strip() and not line.startswith("#")]


def units() -> set[str]:
    found = {p.name for p in KOP.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    found |= {p.stem for p in KOP.glob("*.py") if p.stem != "__init__"}
    return found


def unit_of(module: str) -> str | None:
    """'kop.topics.manager' -> 'topics'; None outside kop or for the root package itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == "kop" and len(parts) > 1 else None


def import_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the files (with line) that import it."""
    known = units()
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(KOP.rglob("*.py")):
        rel = path.relative_to(ROOT)
        parts = list(rel.with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        src = unit_of(".".join(parts))
        if src is None:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(rel))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = parts if is_pkg else parts[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                # `from kop import metrics` names the unit in the imported name
                targets = [module] if unit_of(module) else [f"{module}.{a.name}" for a in node.names]
            for target in targets:
                dst = unit_of(target)
                if dst is not None and dst != src and dst in known:
                    graph.setdefault(src, {}).setdefault(dst, []).append(f"{rel}:{node.lineno}")
    return graph


def test_every_unit_has_a_layer_in_the_doc():
    placed = [u for layer in doc_layers() for u in layer]
    assert len(placed) == len(set(placed)), "a unit is listed twice in the layers block"
    assert set(placed) == units(), "docs/architecture.md's layers block must list every package/module of kop/"


def test_imports_run_downward_only():
    level = {u: i for i, layer in enumerate(reversed(doc_layers())) for u in layer}
    upward = [
        f"{src} -> {dst} ({', '.join(where)})"
        for src, deps in import_graph().items()
        for dst, where in deps.items()
        if level[dst] >= level[src]
    ]
    assert not upward, "imports that do not run downward:\n" + "\n".join(upward)


def test_no_cycles_between_packages():
    found = cycles({src: set(deps) for src, deps in import_graph().items()})
    assert not found, f"import cycles between packages: {found}"


def test_the_graph_is_derived_from_real_imports():
    """Guards the checker itself: arrows known to exist (a lazy one, a type-only one) are found."""
    graph = import_graph()
    assert "topics" in graph["coordinator"]
    assert "services" in graph["admin"]  # only under TYPE_CHECKING in kop/admin/
    assert "storage" in graph["server"]  # only inside functions in kop/server/storage.py


def test_the_readme_layout_lists_every_unit():
    """README's Layout block names each package and module directly under kop/ (kop/x/ or kop/x.py)."""
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"^## Layout\n.*?^```\n(.*?)^```", readme, re.S | re.M)
    assert m, "README.md has no Layout block"
    listed = set(re.findall(r"^kop/([A-Za-z_]+)(?:/|\.py)\s", m.group(1), re.M))
    assert units() <= listed, f"README's Layout misses: {sorted(units() - listed)}"
