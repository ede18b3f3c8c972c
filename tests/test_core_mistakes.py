"""Common mistakes a new user makes, each refused early with a message that says what to do.

Messages are compared with snapshots in tests/snapshots/. This module does not use
``from __future__ import annotations`` on purpose: the mistakes are written the way they
evaluate at definition time; the string spelling is covered separately.
"""

from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from resolvent import Container, InvalidSignature, Resolve, ResolventError, Scope
from snapshot import assert_snapshot

RAN: list[str] = []


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    RAN.clear()


def get_name() -> str:
    RAN.append("get_name")
    return "ada"


class Ctx:
    """A framework value type."""


def compile_error(fn: Any) -> str:
    with pytest.raises(InvalidSignature) as info:
        Container().compile(fn)
    assert RAN == []
    return str(info.value)


# -- x: T = Resolve(fn), the FastAPI habit ---------------------------------------------


def test_marker_as_default_is_refused() -> None:
    async def greet(name: str = Resolve(get_name)) -> str:  # type: ignore[assignment]
        return f"hello {name}"

    message = compile_error(greet)
    assert_snapshot("marker_as_default", message.replace(greet.__qualname__, "greet"))
    assert "'name'" in message
    assert "name: Annotated[str, Resolve(get_name)]" in message


def test_marker_as_default_is_refused_at_registration() -> None:
    def uses(name: str = Resolve(get_name)) -> str:  # type: ignore[assignment]
        return name

    with pytest.raises(InvalidSignature, match="as its default"):
        Container().provide(uses)


# -- Annotated[T, Resolve] without parentheses -------------------------------------------


def test_marker_class_without_parentheses_is_refused() -> None:
    async def greet(name: Annotated[str, Resolve]) -> str:
        return name

    message = compile_error(greet)
    assert_snapshot("marker_class_in_annotated", message.replace(greet.__qualname__, "greet"))


async def test_marker_class_is_not_silently_a_call_argument() -> None:
    async def greet(name: Annotated[str, Resolve]) -> str:
        return name

    with pytest.raises(InvalidSignature, match="without parentheses"):
        await Container().run(greet, name="ada")


# -- x: Resolve(fn) ----------------------------------------------------------------------


def test_marker_as_annotation_is_refused() -> None:
    async def greet(name: Resolve(get_name)) -> str:  # type: ignore[valid-type]
        return str(name)

    message = compile_error(greet)
    assert_snapshot("marker_as_annotation", message.replace(greet.__qualname__, "greet"))


def test_marker_as_string_annotation_is_refused() -> None:
    async def greet(name: "Resolve(get_name)") -> str:  # type: ignore[valid-type]
        return str(name)

    message = compile_error(greet)
    assert "annotated with the marker itself" in message
    assert "'name'" in message


def test_bare_marker_class_as_annotation_is_refused() -> None:
    async def greet(name: Resolve) -> str:
        return str(name)

    assert "annotated with the marker itself" in compile_error(greet)


# -- Resolve(fn()) -----------------------------------------------------------------------


def test_marker_given_a_called_function_is_refused() -> None:
    async def greet(name: Annotated[str, Resolve(get_name())]) -> str:  # type: ignore[arg-type]
        return name

    RAN.clear()  # get_name() ran when the annotation was written, as in user code
    message = compile_error(greet)
    assert_snapshot("marker_given_a_value", message.replace(greet.__qualname__, "greet"))


# -- positional-only parameters with defaults --------------------------------------------


async def test_positional_only_with_default_keeps_its_default(anyio_backend: str) -> None:
    async def handler(limit: int = 10, /, name: Annotated[str, Resolve(get_name)] = "") -> str:
        return f"{name}:{limit}"

    container = Container()
    assert await container.run(handler) == "ada:10"
    container.provide(handler)  # registering is fine too


# -- a pydantic model used as a provider -------------------------------------------------


class Profile(BaseModel):
    name: str
    age: int


class Settings(BaseModel):
    debug: bool = False


def test_pydantic_model_as_provider_is_refused() -> None:
    async def handler(profile: Annotated[Profile, Resolve(Profile)]) -> str:
        return profile.name

    message = compile_error(handler)
    assert_snapshot("pydantic_model_provider", message)
    with pytest.raises(InvalidSignature, match="pydantic model"):
        Container().provide(Profile)


async def test_pydantic_model_without_required_fields_still_provides(anyio_backend: str) -> None:
    async def handler(settings: Annotated[Settings, Resolve(Settings)]) -> bool:
        return settings.debug

    assert await Container().run(handler) is False


# -- @container.provider with or without parentheses -------------------------------------


async def test_provider_decorator_without_parentheses(anyio_backend: str) -> None:
    container = Container()

    @container.provider
    def user_name() -> str:
        return "ada"

    @container.provider()
    def greeting(name: Annotated[str, Resolve()]) -> bytes:
        return f"hi {name}".encode()

    async def handler(g: Annotated[bytes, Resolve()]) -> bytes:
        return g

    assert user_name() == "ada"  # the decorator returns the function itself
    assert await container.run(handler) == b"hi ada"


# -- scopes and framework values at run time ---------------------------------------------


async def test_session_plan_on_closed_container_names_the_session_value(
    anyio_backend: str,
) -> None:
    container = Container()

    @container.provider(scope=Scope.SESSION)
    async def cart() -> list[str]:
        return []

    async def handler(items: Annotated[list[str], Resolve()]) -> int:
        return len(items)

    async with container, container.session() as session:
        assert await session.run(handler) == 0
    with pytest.raises(ResolventError) as info:
        async with container.session() as session:
            await session.run(handler)
    message = str(info.value).replace(cart.__qualname__, "cart")
    message = message.replace(handler.__qualname__, "handler")
    assert_snapshot("session_plan_closed_container", message)
    assert "APP-scoped" not in message


async def test_root_needing_a_framework_value_run_without_it(anyio_backend: str) -> None:
    container = Container()
    container.add_value_type(Ctx)

    async def handler(ctx: Ctx) -> str:
        return "ok"

    with pytest.raises(ResolventError) as info:
        await container.run(handler)
    assert not isinstance(info.value, KeyError)
    message = str(info.value).replace(handler.__qualname__, "handler")
    assert_snapshot("root_value_not_given", message)
    async with container.call(values={Ctx: Ctx()}) as call:
        assert await call.run(handler) == "ok"


class Mailer:
    """An object a test fakes."""

    def __repr__(self) -> str:
        return "Mailer()"


def mailer() -> Mailer:
    return Mailer()


def test_override_with_the_fake_itself_says_to_pass_a_function() -> None:
    # The usual slip: the fake object instead of a function returning it. Refused when
    # the block is made, naming override and the fix, not later as an uncallable resolver.
    container = Container()
    container.provide(mailer, scope=Scope.APP)
    with pytest.raises(InvalidSignature) as caught:
        container.override(mailer, Mailer())  # type: ignore[arg-type]
    assert_snapshot("override_given_the_fake_itself", str(caught.value))


def test_override_of_something_that_is_no_provider_is_refused() -> None:
    with pytest.raises(InvalidSignature) as caught:
        Container().override("mailer", mailer)
    assert_snapshot("override_of_a_non_callable_target", str(caught.value))


def test_running_or_registering_a_non_callable_names_no_marker() -> None:
    container = Container()
    with pytest.raises(InvalidSignature) as caught:
        container.provide(mailer(), scope=Scope.APP)  # type: ignore[call-overload]
    assert_snapshot("provide_a_non_callable", str(caught.value))


class Request:
    """A framework value type."""


def test_a_start_target_that_is_no_provider_is_refused_where_it_was_given() -> None:
    # A provider's name as a string: refused when the container is made, not at entry
    # as a `Resolve('pool')` on an invented parameter of container.start.
    with pytest.raises(InvalidSignature) as caught:
        Container(warm=["open_pool"])  # type: ignore[list-item]
    assert_snapshot("warm_given_a_name", str(caught.value))


async def test_start_given_a_name_is_refused(anyio_backend: str) -> None:
    container = Container()
    async with container:
        with pytest.raises(InvalidSignature, match=r"^container\.start\(\.\.\.\) was given 'x'"):
            await container.start("x")  # type: ignore[arg-type]


def test_container_values_given_one_type_says_to_pass_a_tuple() -> None:
    with pytest.raises(TypeError, match=r"fix: Container\(values=\(Request,\)\)"):
        Container(values=Request)


async def test_call_values_given_a_list_says_to_pass_a_dict(anyio_backend: str) -> None:
    # `values=[request]` (the types are a tuple, the objects a dict): a message, not
    # "list indices must be integers or slices, not type" from deep in a call.
    container = Container(values=(Request,))

    async def route(request: Request) -> str:
        return "ok"

    with pytest.raises(TypeError) as caught:
        async with container.call(values=[Request()]) as call:  # type: ignore[arg-type]
            await call.run(route)
    assert_snapshot("call_values_given_a_list", str(caught.value))
    async with container, container.session() as session:
        with pytest.raises(TypeError, match="takes a dict"):
            session.call(values=(Request(),))  # type: ignore[arg-type]
        async with session.call(values={Request: Request()}) as call:
            assert await call.run(route) == "ok"
