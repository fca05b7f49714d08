"""Code-shape rules of the project's style (README, docs/architecture.md), checked on the source with ast.

No function in kop/ is longer than 80 lines unless the comment block right above it (above its decorators)
has a line starting `# long:` that says why the length is the clearer shape.
"""

from __future__ import annotations

import ast
from pathlib import Path

KOP = Path(__file__).resolve().parent.parent / "kop"
MAX_LINES = 80


def _justified(lines: list[str], first_line: int) -> bool:
    """Whether the comment lines directly above line `first_line` (1-based) hold a `# long:` reason."""
    i = first_line - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        if lines[i].strip().startswith("# long:") and len(lines[i].strip()) > len("# long:") + 10:
            return True
        i -= 1
    return False


def long_functions() -> list[str]:
    found = []
    for path in sorted(KOP.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            length = node.end_lineno - node.lineno + 1
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if length > MAX_LINES and not _justified(lines, first):
                found.append(f"{path.relative_to(KOP.parent)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_over_80_lines_without_a_reason():
    assert not long_functions(), "functions over 80 lines without a '# long:' comment above them:\n" + "\n".join(
        long_functions())


def test_the_rule_sees_a_long_function(tmp_path):
    """Guards the checker: a 90-line function without the comment is found, with it is not."""
    body = "\n".join(f"    x{i} = {i}" for i in range(90))
    src = f"def f():\n{body}\n"
    node = ast.parse(src).body[0]
    assert node.end_lineno - node.lineno + 1 > MAX_LINES
    assert not _justified(src.splitlines(), node.lineno)
    commented = "# long: one table of ninety rows reads best as one table\n" + src
    assert _justified(commented.splitlines(), 2)


def test_test_files_have_unique_names() -> None:
    """pytest imports test files by basename (rootdir-relative packages are not used here): a unit test and an
    e2e module of the same name stop the whole run at collection, which a run of either file alone never shows."""
    tests = Path(__file__).resolve().parent
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted(tests.rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(tests)} and {path.relative_to(tests)}")
        seen.setdefault(path.name, path)
    assert not clashes, clashes
