"""The package's layout: imports between its modules run one way, with no circle.

Every import counts: at the top of a module, under ``if TYPE_CHECKING:``, and inside a
function (a lazy import is still a dependency; it only hides the circle from the import
system). ARCHITECTURE.md draws the layers this test holds.
"""

from __future__ import annotations

import ast
import re

import pytest

from package_imports import PACKAGE, SRC, import_graph, imports_of


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph.get(node, ())):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe(graph: dict[str, set[str]], component: list[str]) -> str:
    members = set(component)
    edges = [f"{a} -> {b}" for a in component for b in sorted(graph[a] & members)]
    return "circle: " + ", ".join(component) + "\n  " + "\n  ".join(edges)


def test_no_import_circle_between_the_packages_modules() -> None:
    graph = import_graph()
    found = circles(graph)
    assert not found, (
        "imports must run one way (see ARCHITECTURE.md); move the shared name down a layer "
        "or pass it in from above:\n" + "\n".join(describe(graph, c) for c in found)
    )


# Where the core reaches an integration on purpose, and why; each import is made only once
# the integration's own library is in use, and stays inside one function.
CORE_TO_INTEGRATION = {
    # the start-up guard runs when a container's lifespan starts an MCPServer, even if the
    # server's module never imported resolvent.mcp (one that forgot @inject does not)
    "resolvent.mcp._guard": "the MCP start-up guard, for a server that is an MCPServer",
}


def test_the_core_never_imports_an_integration() -> None:
    graph = import_graph()
    integrations = {n for n in graph if n.startswith(f"{PACKAGE}.mcp")} | {
        f"{PACKAGE}.starlette",
        f"{PACKAGE}.redis",
    }
    core = {n for n in graph if n.rpartition(".")[2].startswith("_") and n.count(".") == 1}
    wrong = {
        f"{a} -> {b}"
        for a in sorted(core)
        for b in sorted(graph[a] & integrations)
        if b not in CORE_TO_INTEGRATION
    }
    assert not wrong, f"the core imports an integration: {sorted(wrong)}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ._b import x", {"resolvent._b"}),
        ("from . import _b", {"resolvent._b"}),
        ("import resolvent._b", {"resolvent._b"}),
        ("if TYPE_CHECKING:\n    from ._b import x", {"resolvent._b"}),
        ("def f():\n    from ._b import x", {"resolvent._b"}),
        ("from ._sub import y", {"resolvent._sub"}),
        ("from ._sub import c, y", {"resolvent._sub", "resolvent._sub.c"}),
        ("from ._sub.c import y", {"resolvent._sub.c"}),
        ("import json", set()),
    ],
)
def test_every_kind_of_import_counts(source: str, expected: set[str]) -> None:
    known = {"resolvent", "resolvent._a", "resolvent._b", "resolvent._sub", "resolvent._sub.c"}
    assert imports_of("resolvent._a", ast.parse(source + "\n"), False, known) == expected


def test_a_circle_is_found_and_named() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert "c -> a" in describe(graph, ["a", "b", "c"])


ARCHITECTURE = SRC.parent / "ARCHITECTURE.md"


def test_architecture_md_maps_every_module() -> None:
    """ARCHITECTURE.md names each module, each subpackage and each module inside one (by its
    path from the package), and no module that is gone; its diagram shows every layer's rooms."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    named = set(re.findall(r"`([A-Za-z_][\w/]*(?:\.py|/))`", text))
    root = SRC / PACKAGE
    rooms = {p.name for p in root.glob("*.py") if p.name not in {"__init__.py", "__main__.py"}}
    packages = {p.name for p in root.iterdir() if (p / "__init__.py").exists()}
    inside = {f"{pkg}/{p.name}" for pkg in packages for p in (root / pkg).glob("*.py")}
    rooms |= {f"{pkg}/" for pkg in packages} | inside
    names = [p.name for p in root.rglob("*.py")]
    # a module inside a subpackage may go by its own name where no other module has it
    named |= {r for r in inside if names.count(r.split("/")[1]) == 1 and r.split("/")[1] in named}
    assert not rooms - named, f"ARCHITECTURE.md does not map {sorted(rooms - named)}"
    every = {p.name for p in root.rglob("*.py")} | rooms
    gone = {name for name in named - every if "/" not in name}  # a bare module name
    gone |= {n for n in named if n.split("/")[0] in packages and n.endswith(".py")} - inside
    assert not gone, f"ARCHITECTURE.md maps modules that do not exist: {sorted(gone)}"
    diagram = text.split("```")[1]
    drawn = set(re.findall(r"[A-Za-z_]\w*", diagram))
    top = {p.stem for p in root.glob("*.py") if p.name != "__init__.py"} | packages
    assert not top - drawn, f"ARCHITECTURE.md's diagram leaves out {sorted(top - drawn)}"
