"""Compile-time mistakes: each is an InvalidSignature with a readable message, raised
before any resolver runs. Messages are compared with snapshots in tests/snapshots/.

Resolvers live at module level (and annotations are strings) so a cycle can be written.
"""

from __future__ import annotations

from typing import Annotated, Optional, Union

import pytest
from pydantic import BaseModel

from resolvent import Container, Elicit, InvalidSignature, Resolve, Scope
from snapshot import assert_snapshot

RAN: list[str] = []


class Ctx:
    """A framework value type."""


class Name(BaseModel):
    name: str


class Age(BaseModel):
    age: int


# -- a cycle: handler -> cycle_a -> cycle_b -> cycle_c -> cycle_a ------------------------


async def cycle_a(b: Annotated[int, Resolve(cycle_b)]) -> int:
    RAN.append("a")
    return b


async def cycle_b(c: Annotated[int, Resolve(cycle_c)]) -> int:
    RAN.append("b")
    return c


async def cycle_c(a: Annotated[int, Resolve(cycle_a)]) -> int:
    RAN.append("c")
    return a


async def cycle_handler(x: Annotated[int, Resolve(cycle_a)]) -> int:
    return x


async def self_loop(me: Annotated[int, Resolve(self_loop)]) -> int:
    RAN.append("self")
    return me


async def self_loop_handler(x: Annotated[int, Resolve(self_loop)]) -> int:
    return x


# -- unclassifiable ----------------------------------------------------------------------


async def needs_mystery(mystery: Name) -> str:
    RAN.append("needs_mystery")
    return mystery.name


async def unclassifiable_handler(user_id: str, s: Annotated[str, Resolve(needs_mystery)]) -> str:
    return s


# -- captive dependencies ----------------------------------------------------------------


async def per_call() -> int:
    RAN.append("per_call")
    return 1


async def app_on_call(x: Annotated[int, Resolve(per_call)]) -> int:
    RAN.append("app_on_call")
    return x


async def app_on_call_handler(x: Annotated[int, Resolve(app_on_call)]) -> int:
    return x


async def app_takes_arg(user_id: str) -> str:
    RAN.append("app_takes_arg")
    return user_id


async def app_takes_arg_handler(user_id: str, x: Annotated[str, Resolve(app_takes_arg)]) -> str:
    return x


async def session_takes_value(ctx: Ctx) -> Ctx:
    RAN.append("session_takes_value")
    return ctx


async def session_takes_value_handler(x: Annotated[Ctx, Resolve(session_takes_value)]) -> Ctx:
    return x


# -- markers in unions -------------------------------------------------------------------


async def leaf() -> int:
    RAN.append("leaf")
    return 1


async def marker_in_optional(x: Optional[Annotated[int, Resolve(leaf)]] = None) -> int:  # noqa: UP045
    RAN.append("marker_in_optional")
    return x or 0


async def marker_in_union(x: Union[Annotated[int, Resolve(leaf)], str]) -> int:  # noqa: UP007
    RAN.append("marker_in_union")
    return 0


async def marker_in_pipe_union(x: Annotated[int, Resolve(leaf)] | None) -> int:
    RAN.append("marker_in_pipe_union")
    return 0


async def uses_marker_in_optional(x: Annotated[int, Resolve(marker_in_optional)]) -> int:
    return x


# -- two question arms -------------------------------------------------------------------


async def two_arms() -> Elicit[Name] | Elicit[Age] | int:
    RAN.append("two_arms")
    return 1


async def uses_two_arms(x: Annotated[int, Resolve(two_arms)]) -> int:
    return x


# -- positional-only ---------------------------------------------------------------------


async def positional_only(x: Annotated[int, Resolve(leaf)], /) -> int:
    RAN.append("positional_only")
    return x


async def uses_positional_only(x: Annotated[int, Resolve(positional_only)]) -> int:
    return x


async def star_args(*rest: int) -> int:
    RAN.append("star_args")
    return 0


async def uses_star_args(x: Annotated[int, Resolve(star_args)]) -> int:
    return x


# -- asking outside CALL -----------------------------------------------------------------


async def app_asks() -> Elicit[Name] | Name:
    RAN.append("app_asks")
    return Name(name="x")


async def uses_app_asks(x: Annotated[Name, Resolve(app_asks)]) -> Name:
    return x


@pytest.fixture(autouse=True)
def _reset() -> None:
    RAN.clear()


def compile_error(container: Container, fn: object) -> str:
    with pytest.raises(InvalidSignature) as info:
        container.compile(fn)  # type: ignore[arg-type]
    return str(info.value)


async def run_error(container: Container, fn: object, **kwargs: object) -> str:
    """Running must fail the same way, and before any resolver ran."""
    async with container:
        with pytest.raises(InvalidSignature) as info:
            await container.run(fn, **kwargs)  # type: ignore[arg-type]
    assert RAN == []
    return str(info.value)


async def test_cycle_names_the_whole_path() -> None:
    container = Container()
    message = compile_error(container, cycle_handler)
    assert_snapshot("cycle", message)
    for name in ("cycle_a", "cycle_b", "cycle_c"):
        assert name in message
    assert await run_error(container, cycle_handler) == message


def test_self_loop_is_a_cycle() -> None:
    message = compile_error(Container(), self_loop_handler)
    assert_snapshot("cycle_self", message)
    assert RAN == []


async def test_unclassifiable_parameter() -> None:
    container = Container(values=(Ctx,))
    message = compile_error(container, unclassifiable_handler)
    assert_snapshot("unclassifiable", message)
    assert await run_error(container, unclassifiable_handler, user_id="u") == message


async def test_captive_app_depends_on_call() -> None:
    container = Container()
    container.provide(app_on_call, scope=Scope.APP)
    message = compile_error(container, app_on_call_handler)
    assert_snapshot("captive_app_on_call", message)
    assert await run_error(container, app_on_call_handler) == message


async def test_captive_session_depends_on_call_provider() -> None:
    container = Container()
    container.provide(app_on_call, scope=Scope.SESSION)
    container.provide(per_call, scope=Scope.CALL)
    message = compile_error(container, app_on_call_handler)
    assert "captive dependency" in message
    assert "Scope.SESSION" in message
    assert "Scope.CALL" in message


def test_app_may_depend_on_session_is_captive_but_session_on_app_is_fine() -> None:
    container = Container()
    container.provide(per_call, scope=Scope.SESSION)
    container.provide(app_on_call, scope=Scope.APP)
    assert "captive dependency" in compile_error(container, app_on_call_handler)

    fine = Container()
    fine.provide(per_call, scope=Scope.APP)
    fine.provide(app_on_call, scope=Scope.SESSION)
    fine.compile(app_on_call_handler)


async def test_captive_app_takes_call_argument() -> None:
    container = Container()
    container.provide(app_takes_arg, scope=Scope.APP)
    message = compile_error(container, app_takes_arg_handler)
    assert_snapshot("captive_app_takes_argument", message)
    assert await run_error(container, app_takes_arg_handler, user_id="u") == message


def test_captive_session_takes_framework_value() -> None:
    container = Container(values=(Ctx,))
    container.provide(session_takes_value, scope=Scope.SESSION)
    message = compile_error(container, session_takes_value_handler)
    assert_snapshot("captive_session_takes_value", message)
    assert RAN == []


@pytest.mark.parametrize("fn", [marker_in_optional, marker_in_union, marker_in_pipe_union])
def test_marker_in_union_raises_at_registration(fn: object) -> None:
    container = Container()
    with pytest.raises(InvalidSignature) as info:
        container.provide(fn)  # type: ignore[arg-type]
    assert "hides Resolve(" in str(info.value)
    assert "union or Optional" in str(info.value)
    assert RAN == []


def test_marker_in_optional_message() -> None:
    with pytest.raises(InvalidSignature) as info:
        Container().provide(marker_in_optional)
    assert_snapshot("marker_in_optional", str(info.value))


async def test_marker_in_union_unregistered_raises_at_compile() -> None:
    container = Container()
    message = compile_error(container, uses_marker_in_optional)
    assert "hides Resolve(" in message
    assert await run_error(container, uses_marker_in_optional) == message


def test_marker_in_union_on_the_root_raises_at_compile() -> None:
    message = compile_error(Container(), marker_in_union)
    assert "parameter 'x'" in message
    assert "hides Resolve(" in message


def test_two_elicit_arms_raise_at_registration() -> None:
    container = Container()
    with pytest.raises(InvalidSignature) as info:
        container.provide(two_arms)
    assert_snapshot("two_question_arms", str(info.value))
    assert RAN == []


async def test_two_elicit_arms_unregistered_raise_at_compile() -> None:
    container = Container()
    message = compile_error(container, uses_two_arms)
    assert "2 question arms" in message
    assert await run_error(container, uses_two_arms) == message


async def test_positional_only_parameter() -> None:
    container = Container()
    with pytest.raises(InvalidSignature) as info:
        container.provide(positional_only)
    assert_snapshot("positional_only", str(info.value))
    message = compile_error(container, uses_positional_only)
    assert "positional-only" in message
    assert await run_error(container, uses_positional_only) == message


def test_var_positional_parameter() -> None:
    message = compile_error(Container(), uses_star_args)
    assert "'rest'" in message
    assert "variadic positional" in message


def test_app_scoped_resolver_that_may_ask() -> None:
    container = Container()
    container.provide(app_asks, scope=Scope.APP)
    message = compile_error(container, uses_app_asks)
    assert "only CALL-scoped resolvers may ask" in message
    assert RAN == []


def test_errors_are_type_errors_too() -> None:
    with pytest.raises(TypeError):
        Container().compile(cycle_handler)


class Pool:
    """Offered by exactly one provider."""


async def open_pool() -> Pool:
    RAN.append("open_pool")
    return Pool()


async def uses_optional_pool(pool: Annotated[Pool | None, Resolve()] = None) -> str:
    return "ran"


async def test_resolve_by_an_optional_type_names_the_provider_of_its_member() -> None:
    # `Pool | None` is looked up as that exact type; the fix used to be to register a
    # provider returning `Pool | None`, when one offering Pool was there all along.
    container = Container()
    container.provide(open_pool, scope=Scope.APP)
    message = compile_error(container, uses_optional_pool)
    assert_snapshot("resolve_by_optional_type", message)
    assert await run_error(container, uses_optional_pool) == message


def test_a_scope_that_is_not_a_scope_says_the_three_there_are() -> None:
    container = Container()

    def settings() -> str:
        return "s"

    with pytest.raises(TypeError) as caught:
        container.provide(settings, scope="app")  # type: ignore[arg-type]
    assert str(caught.value) == (
        "scope must be a resolvent.Scope, not 'app'\n"
        "  fix: pass scope=Scope.APP, Scope.SESSION or Scope.CALL"
    )
