"""The whole text of each compile error, for a mistake below the compiled function.

A compile error is what a user reads to find and fix a mistake: what is wrong, the path
of calls from the compiled function down to it, and the fix, spelled with the names the
user wrote (``Resolve(open_pool)``, not the qualified name resolvent shows elsewhere).
Each is compared whole with a snapshot in tests/snapshots/. The resolvers live at module
level, below a handler, so the path has several hops and their qualified names differ
from the ones the fixes spell.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from resolvent import Container, Elicit, InvalidSignature, MemoryStore, Resolve, Scope, State
from snapshot import assert_snapshot


class Pool:
    """Offered by the providers of the ambiguous and missing cases."""


class Conn:
    """What entering a `Files` gives."""


class Files:
    """A context manager class: a provider returning it offers a Conn."""

    def __enter__(self) -> Conn:
        return Conn()

    def __exit__(self, *exc: object) -> None:
        pass


class HalfOpen:
    """Has `__enter__` but no `__exit__`: not a context manager, so it is not entered."""

    def __enter__(self) -> Conn:
        return Conn()


class Name(BaseModel):
    name: str


class Ctx:
    """A framework value type."""


class Req:
    """Another framework value type."""


class Cart(BaseModel):
    items: list[str] = []


# -- no provider, several providers ----------------------------------------------------------


async def uses_pool(pool: Annotated[Pool, Resolve()]) -> str:
    return "ran"


async def pool_handler(v: Annotated[str, Resolve(uses_pool)]) -> str:
    return v


async def open_pool() -> Pool:
    return Pool()


async def open_other_pool() -> Pool:
    return Pool()


def make_pool(label: str) -> Pool:
    return Pool()


async def migrate() -> None:
    """Registered for its side effect: it returns None."""


async def uses_maybe_pool(pool: Annotated[Pool | None, Resolve()] = None) -> str:
    return "ran"


async def maybe_pool_handler(v: Annotated[str, Resolve(uses_maybe_pool)]) -> str:
    return v


def open_files() -> Files:
    return Files()


def open_more_files() -> Files:
    return Files()


async def uses_files(files: Annotated[Files, Resolve()]) -> str:
    return "ran"


async def files_handler(v: Annotated[str, Resolve(uses_files)]) -> str:
    return v


# -- unclassifiable parameters ---------------------------------------------------------------


async def needs_mystery(mystery: Name) -> str:
    return mystery.name


async def mystery_handler(v: Annotated[str, Resolve(needs_mystery)]) -> str:
    return v


async def mystery_handler_with_arguments(
    user_id: str, tenant: str, v: Annotated[str, Resolve(needs_mystery)]
) -> str:
    return v


async def needs_unknown(thing: Nowhere) -> str:  # type: ignore[name-defined] # noqa: F821
    return "ran"


async def unknown_handler(v: Annotated[str, Resolve(needs_unknown)]) -> str:
    return v


# -- types: what a consumer expects and what its resolver gives ------------------------------


def label(prefix: str) -> str:
    return prefix


async def uses_label(n: Annotated[int, Resolve(functools.partial(label, "x"))]) -> str:
    return "ran"


async def label_handler(v: Annotated[str, Resolve(uses_label)]) -> str:
    return v


async def uses_files_itself(files: Annotated[Files, Resolve(open_files)]) -> str:
    return "ran"


async def files_itself_handler(v: Annotated[str, Resolve(uses_files_itself)]) -> str:
    return v


def plain_label() -> str:
    return "x"


async def uses_maybe_int(n: Annotated[int | None, Resolve(plain_label)] = None) -> str:
    return "ran"


async def maybe_int_handler(v: Annotated[str, Resolve(uses_maybe_int)]) -> str:
    return v


async def uses_half_open(n: Annotated[int, Resolve(HalfOpen)]) -> str:
    return "ran"


async def half_open_handler(v: Annotated[str, Resolve(uses_half_open)]) -> str:
    return v


async def ask_name() -> Elicit[Name] | Name:
    return Name(name="x")


def ask_name_of(prompt: str) -> Elicit[Name] | Name:
    return Name(name=prompt)


def open_files_in(folder: str) -> Files:
    return Files()


async def uses_asked_partial(
    n: Annotated[int, Resolve(functools.partial(ask_name_of, "?"))],
) -> str:
    return "ran"


async def asked_partial_handler(v: Annotated[str, Resolve(uses_asked_partial)]) -> str:
    return v


async def uses_files_partial(
    files: Annotated[Files, Resolve(functools.partial(open_files_in, "/srv"))],
) -> str:
    return "ran"


async def files_partial_handler(v: Annotated[str, Resolve(uses_files_partial)]) -> str:
    return v


async def uses_name_as_int(n: Annotated[int, Resolve(ask_name)]) -> str:
    return "ran"


async def name_as_int_handler(v: Annotated[str, Resolve(uses_name_as_int)]) -> str:
    return v


async def uses_name(n: Annotated[Name, Resolve(ask_name)]) -> str:
    return "ran"


async def name_handler(v: Annotated[str, Resolve(uses_name)]) -> str:
    return v


# -- cycles: below the handler, through the first of two parameters -------------------------


async def leaf() -> int:
    return 1


async def loop_a(b: Annotated[int, Resolve(loop_b)], n: Annotated[int, Resolve(leaf)]) -> int:
    return b + n


async def loop_b(a: Annotated[int, Resolve(loop_a)], n: Annotated[int, Resolve(leaf)]) -> int:
    return a + n


async def enters_loop(a: Annotated[int, Resolve(loop_a)]) -> int:
    return a


async def loop_handler(v: Annotated[int, Resolve(enters_loop)]) -> int:
    return v


# -- lifetimes -------------------------------------------------------------------------------


async def cart_store(scope: str) -> AsyncIterator[MemoryStore]:
    store = MemoryStore()
    yield store
    await store.aclose()


carts = State("cart", Cart, store=functools.partial(cart_store, "session"))


async def show(cart: str, value: Annotated[Cart, Resolve(carts.read)]) -> Cart:
    return value


async def cart_handler(cart: str, v: Annotated[Cart, Resolve(show)]) -> Cart:
    return v


async def per_call() -> int:
    return 1


async def app_wide(x: Annotated[int, Resolve(per_call)]) -> int:
    return x


async def uses_app_wide(x: Annotated[int, Resolve(app_wide)]) -> int:
    return x


async def captive_handler(v: Annotated[int, Resolve(uses_app_wide)]) -> int:
    return v


def container_for(case: str) -> Container:
    container = Container()
    if case == "ambiguous":
        container.provide(open_pool)
        container.provide(open_other_pool)
    elif case == "ambiguous_partial_first":
        container.provide(functools.partial(make_pool, "a"))
        container.provide(open_other_pool)
    elif case == "missing_optional_beside_none":
        container.provide(migrate, scope=Scope.APP)
    elif case == "two_providers_enter_it":
        container.provide(open_files)
        container.provide(open_more_files)
    elif case == "unclassifiable_with_values":
        container.add_value_type(Ctx)
        container.add_value_type(Req)
    elif case == "asks_outside_call":
        container.provide(ask_name, scope=Scope.SESSION)
    elif case == "captive":
        container.provide(app_wide, scope=Scope.APP)
    elif case == "store_of_a_session":
        container.provide(carts.store, scope=Scope.SESSION)  # type: ignore[arg-type]
    return container


CASES: dict[str, Callable[..., Any]] = {
    "missing": pool_handler,
    "missing_optional_beside_none": maybe_pool_handler,
    "ambiguous": pool_handler,
    "ambiguous_partial_first": pool_handler,
    "two_providers_enter_it": files_handler,
    "unclassifiable_without_values": mystery_handler,
    "unclassifiable_with_values": mystery_handler_with_arguments,
    "unresolved_type": unknown_handler,
    "type_mismatch_of_a_partial": label_handler,
    "type_mismatch_of_an_optional": maybe_int_handler,
    "context_manager_wanted_itself": files_itself_handler,
    "not_quite_a_context_manager": half_open_handler,
    "question_answer_is_not_an_int": name_as_int_handler,
    "asks_outside_call": name_handler,
    "question_from_a_partial": asked_partial_handler,
    "context_manager_from_a_partial": files_partial_handler,
    "store_of_a_session": cart_handler,
    "captive": captive_handler,
    "cycle": loop_handler,
}


@pytest.mark.parametrize("case", CASES)
def test_the_whole_message_of_a_mistake_below_the_handler(case: str) -> None:
    with pytest.raises(InvalidSignature) as error:
        container_for(case).compile(CASES[case])
    assert_snapshot(f"compile_{case}", str(error.value))


# `resolvent graph --format mermaid` draws an error's path, its offending edges in red: the
# one captive edge, or the whole cycle, closed on its first resolver.
@pytest.mark.parametrize(
    ("case", "drawn", "offending"),
    [
        ("captive", ["captive_handler", "uses_app_wide", "app_wide", "per_call"], 1),
        ("store_of_a_session", ["cart_handler", "show", "read", "cart_store)"], 1),
        ("cycle", ["loop_handler", "enters_loop", "loop_a", "loop_b", "loop_a"], 2),
    ],
)
def test_the_path_drawn_for_a_mistake_below_the_handler(
    case: str, drawn: list[str], offending: int
) -> None:
    with pytest.raises(InvalidSignature) as error:
        container_for(case).compile(CASES[case])
    assert [name.rsplit(".", 1)[-1] for name in error.value.path] == drawn
    assert error.value.offending == offending


def chain(depth: int) -> Callable[..., Any]:
    """hop1, calling hop2, ... down to hop{depth}, which asks for a Pool no one offers."""
    source = [f"async def hop{depth}(pool: Annotated[Pool, Resolve()]) -> int:\n    return 1"]
    for level in range(depth - 1, 0, -1):
        below = f"to{level + 1}: Annotated[int, Resolve(hop{level + 1})]"
        source.append(f"async def hop{level}({below}) -> int:\n    return to{level + 1}")
    namespace = {"__name__": "deep", "Annotated": Annotated, "Resolve": Resolve, "Pool": Pool}
    exec("\n".join(source), namespace)  # a graph too deep to write out by hand
    return namespace["hop1"]  # type: ignore[no-any-return]


# The 24 calls nearest the mistake, then `...` for the ones between them and the root.
@pytest.mark.parametrize("depth", [25, 26])
def test_a_deep_path_shows_the_root_and_the_calls_nearest_the_mistake(depth: int) -> None:
    hops = [f"deep.hop{level}(to{level + 1}=...)" for level in range(1, depth)]
    hops.append(f"deep.hop{depth}(pool=...)")
    if depth > 25:
        hops = [hops[0], "...", *hops[-24:]]
    with pytest.raises(InvalidSignature) as error:
        Container().compile(chain(depth))
    assert str(error.value).splitlines()[1] == "  path: " + " -> ".join(hops)
