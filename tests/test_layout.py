"""The package's layout: imports between its modules run one way, with no circle.

Every import counts: at the top of a module, under ``if TYPE_CHECKING:``, and inside a
function (a lazy import is still a dependency; it only hides the circle from the import
system). ARCHITECTURE.md draws the layers this test holds.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

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


# The layers, from the ground up, in the order data flows; ARCHITECTURE.md draws them.
# Each names the modules it holds, by their names inside the package: a folder holds every
# module under it, and "__init__" is the package itself. A module imports from its own
# layer and the layers below it, never from one above.
# layers: begin
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vocabulary", ("_vocabulary",)),
    ("reading one function", ("_reading",)),
    ("the graph", ("_graph",)),
    ("the runtime", ("_runtime",)),
    ("the engine", ("_engine",)),
    ("the container", ("_container",)),
    ("stores", ("_stores",)),
    ("the interface", ("_integration",)),
    ("state", ("_state",)),
    ("the package", ("__init__",)),
    ("tools", ("_tools", "__main__")),
    ("integrations", ("mcp", "starlette", "_starlette", "asgi", "testing", "redis")),
)
# layers: end


def layer_of(name: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int | None:
    """The index in *layers* of the layer that holds module *name* (None: no layer does)."""
    inside = name.removeprefix(PACKAGE).removeprefix(".") or "__init__"
    for index, (_, held) in enumerate(layers):
        for place in held:
            if inside == place or (place != "__init__" and inside.startswith(place + ".")):
                return index
    return None


def with_parents(importer: str, target: str) -> set[str]:
    """What importing *target* runs: the module and each package above it (whose
    ``__init__`` runs first), but the package itself and those *importer* is inside of."""
    parts = target.split(".")
    found = {".".join(parts[:n]) for n in range(2, len(parts) + 1)}
    return {t for t in found if not (importer == t or importer.startswith(t + "."))} | {target}


def climbs(
    graph: dict[str, set[str]], layers: tuple[tuple[str, tuple[str, ...]], ...]
) -> list[str]:
    """Each import of a module from a layer above the importer's, with both layers."""
    found: list[str] = []
    for importer in sorted(graph):
        low = layer_of(importer, layers)
        for target in sorted({t for b in graph[importer] for t in with_parents(importer, b)}):
            high = layer_of(target, layers)
            if low is not None and high is not None and high > low:
                found.append(f"{importer} ({layers[low][0]}) imports {target} ({layers[high][0]})")
    return found


def test_every_module_is_in_one_layer() -> None:
    graph = import_graph()
    unplaced = sorted(name for name in graph if layer_of(name) is None)
    assert not unplaced, f"put these modules in a layer of LAYERS (and ARCHITECTURE.md): {unplaced}"
    places = [place for _, held in LAYERS for place in held]
    assert len(places) == len(set(places)), "a module or folder is in two layers"


def test_no_module_imports_from_a_layer_above_it() -> None:
    found = climbs(import_graph(), LAYERS)
    assert not found, (
        "a module imports from a layer above its own (see ARCHITECTURE.md): move the name it "
        "needs down a layer, or pass it in from above:\n  " + "\n  ".join(found)
    )


def test_importing_a_module_runs_the_packages_above_it() -> None:
    assert with_parents("resolvent._b", "resolvent.mcp._guard") == {
        "resolvent.mcp",
        "resolvent.mcp._guard",
    }
    assert with_parents("resolvent.mcp._tool", "resolvent.mcp._guard") == {"resolvent.mcp._guard"}
    assert with_parents("resolvent.mcp", "resolvent._a.b") == {"resolvent._a", "resolvent._a.b"}


def test_a_climb_is_found_through_a_parent_package() -> None:
    layers = (("low", ("_a",)), ("high", ("mcp",)))
    graph = {"resolvent._a": {"resolvent.mcp._guard"}, "resolvent.mcp._guard": {"resolvent._a"}}
    assert climbs(graph, layers) == [
        "resolvent._a (low) imports resolvent.mcp (high)",
        "resolvent._a (low) imports resolvent.mcp._guard (high)",
    ]
    assert layer_of("resolvent", (("face", ("__init__",)),)) == 0
    assert layer_of("resolvent._b", (("face", ("__init__",)),)) is None


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


def holds_code(path: Path) -> bool:
    """Whether the module at *path* holds more than its docstring."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body)


def test_architecture_md_maps_every_module() -> None:
    """ARCHITECTURE.md names each module, each subpackage and each module inside one (by its
    path from the package), and no module that is gone; its diagram shows every layer's rooms."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    named = set(re.findall(r"`([A-Za-z_][\w/]*(?:\.py|/))`", text))
    root = SRC / PACKAGE
    rooms = {p.name for p in root.glob("*.py") if p.name not in {"__init__.py", "__main__.py"}}
    packages = {p.name for p in root.iterdir() if (p / "__init__.py").exists()}
    inside = {
        f"{pkg}/{p.name}"
        for pkg in packages
        for p in (root / pkg).glob("*.py")
        if p.name != "__init__.py" or holds_code(p)  # a layer's folder is named by its heading
    }
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


def diagram_rows(diagram: str) -> list[tuple[str, str]]:
    """The diagram's rows, (layer, what it holds): a row begins with its layer's name (after
    ``->``), two spaces or more, then the modules; a line that begins with spaces only goes on."""
    rows: list[tuple[str, str]] = []
    for line in diagram.strip("\n").splitlines():
        label, _, held = line.strip().removeprefix("-> ").partition("  ")
        if line.startswith(("  -> ", label)) and held:
            rows.append((label, held.strip()))
        elif rows:
            rows[-1] = (rows[-1][0], f"{rows[-1][1]} {line.strip()}")
    return rows


def test_architecture_md_draws_the_layers_in_order() -> None:
    """Its diagram has one row per layer of `LAYERS`, in order, naming what each holds: every
    module, and every folder with the modules inside it."""
    diagram = ARCHITECTURE.read_text(encoding="utf-8").split("```")[1]
    rows = diagram_rows(diagram)
    assert [label for label, _ in rows] == [name for name, _ in LAYERS], (
        "ARCHITECTURE.md's diagram must draw the layers of tests/test_layout.py's LAYERS, in order"
    )
    root = SRC / PACKAGE
    missing: list[str] = []
    for (name, held), (_, row) in zip(LAYERS, rows, strict=True):
        words = set(re.findall(r"[A-Za-z_]\w*", row))
        for place in held:
            folder = root / place.replace(".", "/")
            inner = (
                {p.stem for p in folder.glob("*.py")} - {"__init__"} if folder.is_dir() else set()
            )
            missing += [
                f"{name}: {n}" for n in sorted({place.split(".")[-1]} | inner) if n not in words
            ]
    assert not missing, f"ARCHITECTURE.md's diagram leaves out {missing}"


def test_diagram_rows_are_read_as_drawn() -> None:
    diagram = "\nlow       _a, _b,\n          _c\n  -> high  mcp/ (x)\n"
    assert diagram_rows(diagram) == [("low", "_a, _b, _c"), ("high", "mcp/ (x)")]


# -- sizes: a module a reader takes in whole, a class one concern -------------------------

MODULE_LINES = 500
CLASS_LINES = 300

# Over the bounds when this test came, each no larger than it was then: a module or class
# here may shrink but not grow. Each was being changed by other work as the bounds came, and
# is to be split with it; whoever brings one within its bound takes it out of this table
# (an entry within its bound fails nothing, so a split need not wait for this file). Do not
# add to it: split along a seam a reader would look for (see ARCHITECTURE.md).
OVER_TODAY: dict[str, int] = {}


def sizes(root: Path) -> dict[str, int]:
    """The lines of each module under *root* (``_engine/codegen.py``) and of each class in
    it, nested ones too (``_container/call.py:Call``), from ``class`` to its last line."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(root).as_posix()
        found[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                found[f"{name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return found


def oversized(found: dict[str, int], allowed: dict[str, int]) -> list[str]:
    """What is over its bound and not allowed to be, or grew past what *allowed* says."""
    over: list[str] = []
    for name, lines in found.items():
        bound = CLASS_LINES if ":" in name else MODULE_LINES
        if lines > max(bound, allowed.get(name, 0)):
            kind = "class" if ":" in name else "module"
            over.append(f"{name}: {lines} lines, over the {bound} a {kind} may have")
    return over


def test_no_module_over_500_lines_and_no_class_over_300() -> None:
    over = oversized(sizes(SRC / PACKAGE), OVER_TODAY)
    assert not over, (
        "split these along a seam a reader would look for, and name the new module in "
        "ARCHITECTURE.md (one in OVER_TODAY may not grow):\n  " + "\n  ".join(over)
    )


def test_sizes_count_modules_and_classes(tmp_path: Path) -> None:
    (tmp_path / "_a").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(CLASS_LINES))
    (tmp_path / "_a" / "big.py").write_text(f"class Big:\n{body}\n\nclass Small:\n    pass\n")
    found = sizes(tmp_path)
    assert found == {
        "_a/big.py": CLASS_LINES + 5,
        "_a/big.py:Big": CLASS_LINES + 1,
        "_a/big.py:Small": 2,
    }
    over = oversized(found, {})
    assert over == [f"_a/big.py:Big: {CLASS_LINES + 1} lines, over the 300 a class may have"]
    assert oversized(found, {"_a/big.py:Big": CLASS_LINES + 1}) == []  # as large as allowed
    assert oversized(found, {"_a/big.py:Big": CLASS_LINES}) == over  # it grew
    assert oversized(found, {"_a/big.py:Small": 400}) == over
