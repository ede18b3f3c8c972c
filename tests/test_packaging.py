"""Packaging invariants: optional dependencies stay optional, the public API is
documented, and the package ships its type information."""

from __future__ import annotations

import dataclasses
import importlib.resources
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import resolvent

# Runs in a fresh interpreter: make every import of the MCP SDK fail, then
# import resolvent. The core package must not need (or even try to keep) mcp.
_IMPORT_WITHOUT_MCP = textwrap.dedent(
    """
    import importlib.abc
    import sys

    BLOCKED = ("mcp", "mcp_types")

    class BlockMCP(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if any(fullname == b or fullname.startswith(b + ".") for b in BLOCKED):
                raise ImportError(f"{fullname} is blocked for this test", name=fullname)
            return None

    sys.meta_path.insert(0, BlockMCP())

    import resolvent

    leaked = sorted(
        m for m in sys.modules
        if any(m == b or m.startswith(b + ".") for b in BLOCKED)
    )
    assert "mcp" not in sys.modules, leaked
    assert not leaked, leaked
    print("resolvent imported without mcp")
    """
)


def test_import_does_not_need_mcp(tmp_path: Path) -> None:
    assert "resolvent imported without mcp" in _fresh(_IMPORT_WITHOUT_MCP, tmp_path)


# Standard-library modules `import resolvent` leaves alone: each serves one feature
# (multi-round elicitation state, failure logging) and is imported when that feature
# first runs, so a program that never uses it does not pay for it at start-up.
_LAZY = ("hashlib", "json", "logging", "opentelemetry", "pydantic", "sqlite3")
# The package's own modules that serve one feature, loaded by the function that first
# needs it: the code generator (a plan turning hot), the state stores, overrides (tests),
# the start-up checks (a lifespan starting), the topological sort (a worker-thread step),
# CALL and SESSION scopes (the first `Container.call` or `session`), asking (the first
# resolver that asks), worker threads (the first sync resolver), and what a failure says
# (its note, the log nobody else receives), tracing (a plan compiled traced), and a plan
# rendered for people (its text, diagrams, or the path an error names); and the compiler
# (the first plan compiled: a module that imports resolvent for its markers never compiles).
_LAZY_OWN = (
    "resolvent._graph.compiler",
    "resolvent._graph.checks",
    "resolvent._graph.steps",
    "resolvent._graph.subgraphs",
    "resolvent._reading.typecheck",
    "resolvent._engine.codegen",
    "resolvent._engine.codegen_body",
    "resolvent._runtime.kept",
    "resolvent._graph.render",
    "resolvent._stores",
    "resolvent._container.overrides",
    "resolvent._container.startup",
    "resolvent._graph.toposort",
    "resolvent._state",
    "resolvent._vocabulary.outcomes",
    "resolvent._container.call",
    "resolvent._container.deadlines",
    "resolvent._container.session",
    "resolvent._runtime.rounds",
    "resolvent._runtime.threads",
    "resolvent._runtime.failures",
    "resolvent._vocabulary.log",
    "resolvent._engine.tracing",
    "resolvent._engine.spans",
)


def _fresh(code: str, cwd: Path, *argv: str) -> str:
    """What *code* prints (run with *argv*) in a fresh interpreter, which must succeed."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_import_leaves_feature_modules_unloaded(tmp_path: Path) -> None:
    # What anyio loads itself does not count (older ones import logging, through
    # concurrent.futures).
    code = (
        f"import sys, anyio; before = set(sys.modules); import resolvent; "
        f"print(sorted(m for m in {_LAZY!r} if m in sys.modules and m not in before))"
    )
    found = _fresh(code, tmp_path)
    assert found == "[]", f"imported by `import resolvent`: {found}"


def test_import_leaves_the_packages_feature_modules_unloaded(tmp_path: Path) -> None:
    code = f"import sys, resolvent; print(sorted(m for m in {_LAZY_OWN!r} if m in sys.modules))"
    found = _fresh(code, tmp_path)
    assert found == "[]", f"loaded by `import resolvent`, before anything needs them: {found}"


# Each feature whose module `import resolvent` leaves unloaded, used first thing in a fresh
# interpreter, so nothing another test imported can make it work: the module it needs
# must be loaded by the feature itself. Each program prints "ok" and then the lazy
# modules it found loaded.
_FIRST_USE_PREAMBLE = """
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Annotated
import anyio
from pydantic import BaseModel
from resolvent import Accepted, Container, Elicit, InputRequired, Resolve, Scope
container = Container()

class Name(BaseModel):
    name: str

async def name() -> Elicit[Name]:
    return Elicit("Your name?", Name)

async def greet(who: Annotated[Name, Resolve(name)]) -> str:
    return "hi " + who.name
"""
_FIRST_USE = {
    "a call scope": (
        """
async def hello(name: str) -> str:
    return "hi " + name

async def main() -> str:
    async with container.call() as call:
        return await call.run(hello, name="ann")

assert anyio.run(main) == "hi ann"
# From now on the container opens a call scope through the function itself, a plain global.
assert (
    sys.modules["resolvent._container.container"].open_call
    is sys.modules["resolvent._container.call"].open_call
)
""",
        ("resolvent._container.call", "resolvent._container.deadlines"),
    ),
    # `run` opens a call scope itself for a resource set up in a worker thread.
    "a call scope that run opens": (
        """
def resource() -> Iterator[str]:
    yield "ann"

async def hello(name: Annotated[str, Resolve(resource)]) -> str:
    return "hi " + name

assert anyio.run(container.run, hello) == "hi ann"
assert (
    sys.modules["resolvent._container.container"].open_call
    is sys.modules["resolvent._container.call"].open_call
)
""",
        ("resolvent._container.call", "resolvent._container.deadlines"),
    ),
    # A sync resolver runs in a worker thread: here in a plan's generated code.
    "a worker-thread resolver": (
        """
def name() -> str:
    return "ann"

async def hello(name: Annotated[str, Resolve(name)]) -> str:
    return "hi " + name

assert anyio.run(container.run, hello) == "hi ann"
""",
        ("resolvent._runtime.threads",),
    ),
    # An APP value made by a sync provider, in a worker thread.
    "a worker-thread APP value": (
        """
@container.provider(scope=Scope.APP)
def name() -> str:
    return "ann"

async def hello(name: Annotated[str, Resolve(name)]) -> str:
    return "hi " + name

async def main() -> str:
    async with container:
        return await container.run(hello)

assert anyio.run(main) == "hi ann"
""",
        ("resolvent._runtime.threads",),
    ),
    # The interpreter's and the resource opener's own first hops bind the functions they
    # call per step, so later steps find a plain global.
    "worker threads in concurrent branches": (
        """
def name() -> str:
    return "ann"

def resource() -> Iterator[str]:
    yield "!"

async def hello(
    name: Annotated[str, Resolve(name)], mark: Annotated[str, Resolve(resource)]
) -> str:
    return "hi " + name + mark

async def main() -> str:
    async with container.call(concurrent=True) as call:
        return await call.run(hello)

assert anyio.run(main) == "hi ann!"
threads = sys.modules["resolvent._runtime.threads"]
assert sys.modules["resolvent._engine.interpreter"].in_thread is threads.in_thread
assert sys.modules["resolvent._runtime.resources"].abandonable is threads.abandonable
""",
        ("resolvent._runtime.threads",),
    ),
    "a session": (
        """
@container.provider(scope=Scope.SESSION)
async def who() -> str:
    return "ann"

async def hello(name: Annotated[str, Resolve(who)]) -> str:
    return "hi " + name

async def main() -> str:
    async with container, container.session() as session:
        return await session.run(hello)

assert anyio.run(main) == "hi ann"
""",
        ("resolvent._container.session",),
    ),
    # In a call scope, with an asker: the plan's generated code asks.
    "an asker": (
        """
async def asker(message, schema):
    return Accepted(data=schema(name="ann"))

async def main() -> str:
    async with container.call(asker=asker) as call:
        return await call.run(greet)

assert anyio.run(main) == "hi ann"
""",
        ("resolvent._runtime.rounds",),
    ),
    # Multi-round asking: the interpreter asks, the call keeps the rounds.
    "a round": (
        """
async def main() -> None:
    async with container.call(rounds=True) as call:
        try:
            await call.run(greet)
        except InputRequired as needed:
            assert list(needed.questions.values())[0].message == "Your name?"
        else:
            raise AssertionError("no question was asked")

anyio.run(main)
""",
        ("resolvent._runtime.rounds",),
    ),
    # A resolver fails on a plan's first (interpreted) call: its error gets the chain.
    "a failure": (
        """
async def broken() -> str:
    raise ValueError("boom")

async def use(value: Annotated[str, Resolve(broken)]) -> str:
    return value

async def main() -> None:
    try:
        await container.run(use)
    except ValueError as error:
        assert any("raised by" in note for note in error.__notes__), error.__notes__
    else:
        raise AssertionError("the failure was lost")

anyio.run(main)
""",
        ("resolvent._runtime.failures",),
    ),
    # A plan compiled with tracing on: its spans need the tracing module.
    "tracing": (
        """
async def plain() -> str:
    return "p"

async def use(value: Annotated[str, Resolve(plain)]) -> str:
    return value

container.tracing = True
assert anyio.run(container.run, use) == "p"
""",
        ("resolvent._engine.tracing", "resolvent._engine.spans"),
    ),
    # A finalizer fails: the caller receives the error, and the log says which one.
    "a failed teardown": (
        """
async def resource() -> AsyncIterator[str]:
    yield "r"
    raise ValueError("teardown")

async def use(value: Annotated[str, Resolve(resource)]) -> str:
    return value

async def main() -> None:
    try:
        async with container.call() as call:
            assert await call.run(use) == "r"
    except ValueError as error:
        assert str(error) == "teardown"
    else:
        raise AssertionError("the teardown's failure was lost")

anyio.run(main)
""",
        ("resolvent._vocabulary.log",),
    ),
    # The first plan compiled: the compiler, its checks and its builder of steps.
    "a compile": (
        """
async def plain() -> str:
    return "p"

async def use(value: Annotated[str, Resolve(plain)]) -> str:
    return value

assert [s.fn for s in container.compile(use).steps] == [plain]
""",
        (
            "resolvent._graph.compiler",
            "resolvent._graph.checks",
            "resolvent._graph.steps",
            "resolvent._graph.subgraphs",
            "resolvent._reading.typecheck",
        ),
    ),
    # A plan rendered for people: its text and its diagrams.
    "a rendering": (
        """
async def plain() -> str:
    return "p"

async def use(value: Annotated[str, Resolve(plain)]) -> str:
    return value

plan = container.compile(use)
assert "plain" in plan.describe() and "flowchart" in plan.to_mermaid()
assert plan.to_dot().startswith("digraph")
""",
        ("resolvent._graph.render",),
    ),
}


@pytest.mark.parametrize("feature", sorted(_FIRST_USE))
def test_a_lazy_feature_loads_its_modules_on_first_use(feature: str, tmp_path: Path) -> None:
    program, modules = _FIRST_USE[feature]
    code = (
        _FIRST_USE_PREAMBLE
        + f"assert not any(m in sys.modules for m in {modules!r}), 'loaded by import'\n"
        + program
        + f"print('ok', sorted(m for m in {modules!r} if m in sys.modules))\n"
    )
    assert _fresh(code, tmp_path) == f"ok {sorted(modules)!r}"


def test_a_lazy_public_name_is_the_object_its_module_defines(tmp_path: Path) -> None:
    code = (
        "import resolvent, resolvent._stores.memory as m, resolvent._stores.opener as o; "
        "from resolvent import MemoryStore, open_store, StateKey, SqliteStore, Session; "
        "import resolvent._stores as s, resolvent._stores.sqlite as q; "
        "print(MemoryStore is m.MemoryStore and open_store is o.open_store "
        "and StateKey is s.StateKey and SqliteStore is q.SqliteStore "
        "and Session is __import__('resolvent._container.session')._container.session.Session "
        "and resolvent.Call is __import__('resolvent._container.call')._container.call.Call)"
    )
    assert _fresh(code, tmp_path) == "True"


# `Kind` is built from its class body by the standard library's fast path for enums where
# there is one; without it the class statement makes the enum. Either way, the same enum.
_DESCRIBE_KIND = """
import enum, pickle, sys
if sys.argv[1] == "without":  # the standard library's own modules still use it
    import anyio.lowlevel, anyio.to_thread, dis, inspect, threading
    del enum._simple_enum
from resolvent._reading.kinds import Kind
print(type(Kind) is enum.EnumType, issubclass(Kind, enum.Enum), Kind.__doc__)
print([(k.name, k.value, k.is_resource, k.is_async, repr(k), str(k)) for k in Kind])
print(Kind("function") is Kind.SYNC, Kind["GENERATOR"] is Kind.GENERATOR, len(Kind))
print(all(pickle.loads(pickle.dumps(k)) is k for k in Kind), Kind.SYNC != "function")
# each member in the class itself, not behind a descriptor: per-call code reads
# `Kind.ASYNC_GENERATOR` (a teardown), which must not cost a Python call
print(all(vars(Kind)[k.name] is k for k in Kind))
"""


def test_kind_is_the_same_enum_with_or_without_the_fast_path(tmp_path: Path) -> None:
    fast = _fresh(_DESCRIBE_KIND, tmp_path, "with")
    assert fast.startswith("True True How a provider produces its value"), fast
    assert fast.endswith("True"), fast
    assert _fresh(_DESCRIBE_KIND, tmp_path, "without") == fast


# `import resolvent` defines its record classes without @dataclass, which compiles
# several methods per class at import (about 1 ms each, a dozen classes).
_FIND_DATACLASSES = """
import sys, resolvent
found = sorted(
    f"{name}.{attr}"
    for name, module in list(sys.modules.items())
    if name == "resolvent" or name.startswith("resolvent.")
    for attr, obj in vars(module).items()
    if isinstance(obj, type) and "__dataclass_fields__" in vars(obj)
)
print(found)
"""


def test_import_compiles_no_dataclass(tmp_path: Path) -> None:
    found = _fresh(_FIND_DATACLASSES, tmp_path)
    assert found == "[]", f"dataclasses built by `import resolvent`: {found}"


def _own_docstring(obj: object) -> str | None:
    """The docstring written for obj itself, not one Python generated or inherited."""
    doc = getattr(obj, "__doc__", None)
    if inspect.isclass(obj):
        doc = vars(obj).get("__doc__")
        # @dataclass fills in a missing docstring with the signature.
        if dataclasses.is_dataclass(obj) and doc and doc.startswith(obj.__name__ + "("):
            return None
    if not isinstance(doc, str) or not doc.strip():
        return None
    return doc


def test_public_api_names_exist_and_are_documented() -> None:
    exported = resolvent.__all__
    assert isinstance(exported, list | tuple)
    assert all(isinstance(name, str) for name in exported)
    assert len(set(exported)) == len(exported), "duplicate names in __all__"

    missing = [name for name in exported if not hasattr(resolvent, name)]
    assert not missing, f"__all__ names not defined in resolvent: {missing}"

    # Only classes, functions and modules can carry a docstring of their own;
    # constants, enum members, type aliases and TypeVars are exempt.
    undocumented = [
        name
        for name in exported
        if (
            inspect.isclass(obj := getattr(resolvent, name))
            or inspect.isroutine(obj)
            or inspect.ismodule(obj)
        )
        and _own_docstring(obj) is None
    ]
    assert not undocumented, f"public names without a docstring: {undocumented}"


def test_public_api_exports_nothing_private() -> None:
    private = [
        name
        for name in resolvent.__all__
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
    ]
    assert not private, f"private names in __all__: {private}"

    modules = [name for name in resolvent.__all__ if inspect.ismodule(getattr(resolvent, name))]
    assert not modules, f"modules exported in __all__ (export their contents instead): {modules}"


def test_package_has_docstring() -> None:
    assert resolvent.__doc__ and resolvent.__doc__.strip()


def test_py_typed_is_shipped() -> None:
    marker = importlib.resources.files("resolvent") / "py.typed"
    assert marker.is_file(), f"py.typed missing next to {resolvent.__file__}"
