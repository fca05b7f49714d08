"""Graph helpers of the source-shape tests (tests/test_architecture_layers.py, tests/test_pulsar_imports.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk meets, each as the path that closes it (first node repeated last)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    found: list[list[str]] = []

    def visit(u: str, stack: list[str]) -> None:
        state[u] = 1
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                found.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v, stack + [v])
        state[u] = 2

    for u in sorted(graph):
        if u not in state:
            visit(u, [u])
    return found
