"""The integrations reach the core only through the public package and `resolvent._integration`.

An integration module (mcp/, starlette and _starlette/, testing, _state, _leases, _cli,
_trace_file) may import `resolvent`, the internal interface `resolvent._integration`, other
integration modules and outside libraries; never another private module of the core. And it reads no underscored attribute
of a core object (a container, a plan, a call...): what it needs is a named function of the
interface, so the core can move its private state without breaking an integration.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from package_imports import PACKAGE, imports_of, modules, trees

INTERFACE = f"{PACKAGE}._integration"

# The bench family counts as core: it builds its floors from the code generator's own
# blocks, instruments generated code and times it against the plan's, so it reads plan
# and codegen internals by design (an interface for it would mirror the code generator).
CORE_TOOLS = frozenset(
    f"{PACKAGE}.{name}"
    for name in (
        "_tools.bench",
        "_tools.bench_report",
        "_tools.bench_timing",
        "_tools.floor",
        "_tools.probe",
    )
)

# Imports an integration may make beyond the rule, each for the reason given.
EXCEPTIONS = {
    # The MCP start-up guard sits in the container's layer, whose start-up runs it (see
    # `_startup.run_start_checks`); `resolvent.mcp` hands it on as `check_server`. Through
    # the interface it would load the MCP SDK for every integration.
    f"{PACKAGE}.mcp": {f"{PACKAGE}._container.mcp_guard"},
    # ``resolvent bench`` is the bench family's command line.
    f"{PACKAGE}._tools.cli": {f"{PACKAGE}._tools.bench", f"{PACKAGE}._tools.bench_report"},
}


def is_integration(name: str) -> bool:
    return (
        name == f"{PACKAGE}.mcp"
        or name.startswith(f"{PACKAGE}.mcp.")
        or name.startswith(f"{PACKAGE}._state.")
        or name.startswith(f"{PACKAGE}._starlette.")
        or name
        in {
            f"{PACKAGE}.starlette",
            f"{PACKAGE}._starlette",
            f"{PACKAGE}.testing",
            f"{PACKAGE}._state",
            f"{PACKAGE}._state.leases",
            f"{PACKAGE}._tools.cli",
            f"{PACKAGE}._tools.trace_file",
        }
    )


def is_core(name: str) -> bool:
    """A private module of the core (the interface and the integrations are not)."""
    private = any(part.startswith("_") for part in name.split(".")[1:])
    return private and name != INTERFACE and not is_integration(name)


def private_attributes(tree: ast.AST) -> set[str]:
    """The underscored (not dunder) attributes a core module's classes define: methods,
    ``self._x`` assignments, ``__slots__`` entries and annotated class attributes."""
    names: set[str] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    names.add(node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
            ):
                names |= {
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def reads_of(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """Where *tree* reads one of *names* as an attribute of something not its own
    (``self.x`` and ``cls.x`` are a class's own)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                continue
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_integrations_are_found() -> None:
    found = {n for n in modules() if is_integration(n)}
    assert {f"{PACKAGE}.mcp._tool", f"{PACKAGE}.starlette", f"{PACKAGE}.testing"} <= found
    assert INTERFACE in modules()
    assert set(modules()) >= CORE_TOOLS, "a bench module moved: update CORE_TOOLS"


def test_integrations_import_only_the_package_and_the_interface() -> None:
    known = set(modules())
    wrong: list[str] = []
    for name, (tree, is_package) in sorted(trees().items()):
        if not is_integration(name):
            continue
        allowed = EXCEPTIONS.get(name, set())
        for target in sorted(imports_of(name, tree, is_package, known)):
            if is_core(target) and target not in allowed:
                wrong.append(f"{name} imports {target}")
    assert not wrong, (
        "an integration imports a private module of the core; use `resolvent` or add what "
        "it needs to resolvent._integration:\n  " + "\n  ".join(wrong)
    )


def test_integrations_read_no_private_attribute_of_core_objects() -> None:
    parsed = trees()
    core_names: set[str] = set()
    for name, (tree, _) in parsed.items():
        if is_core(name):
            core_names |= private_attributes(tree)
    assert {"_app", "_ready", "_current", "_on_hot", "_enter"} <= core_names  # the reader works
    wrong = [
        f"{name}:{line}: {text}"
        for name, (tree, _) in sorted(parsed.items())
        if is_integration(name)
        # A name the module's own classes define too is read as their own (without types
        # the test cannot tell the objects apart): `_state` reads its `State`'s `_load`.
        for line, text in reads_of(tree, core_names - private_attributes(tree))
    ]
    assert not wrong, (
        "an integration reads a private attribute of a core object; add a function to "
        "resolvent._integration instead:\n  " + "\n  ".join(wrong)
    )


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("container._app", ["container._app"]),
        ("self._app", []),
        ("plan._on_hot.append(f)", ["plan._on_hot"]),
        ("server._tool_manager", []),  # not a core name: the MCP SDK's own
        ("container.run", []),
    ],
)
def test_a_private_read_is_found(source: str, flagged: list[str]) -> None:
    found = reads_of(ast.parse(source), {"_app", "_on_hot"})
    assert [text for _, text in found] == flagged


def test_a_private_import_is_found(tmp_path: Path) -> None:
    known = {PACKAGE, INTERFACE, f"{PACKAGE}._graph.plan", f"{PACKAGE}.mcp", f"{PACKAGE}.mcp._tool"}
    tree = ast.parse("from .._graph.plan import Plan\nfrom .. import Container\n")
    found = imports_of(f"{PACKAGE}.mcp._tool", tree, False, known)
    assert found == {f"{PACKAGE}._graph.plan", PACKAGE}
    assert is_core(f"{PACKAGE}._graph.plan") and not is_core(PACKAGE) and not is_core(INTERFACE)
