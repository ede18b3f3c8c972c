"""The consumer's T is checked against what its resolver declares, at compile time.

Only a certain mismatch fails; anything that cannot be judged safely passes (a check
that rejects valid code is worse than none). Messages are snapshot-tested.
"""

import enum
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any, Generic, Optional, Protocol, TypeVar, Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from resolvent import Container, InvalidSignature, Resolve, Scope
from resolvent._reading.annotations import type_name
from snapshot import assert_snapshot

T = TypeVar("T")


class Animal:
    pass


class Dog(Animal):
    pass


class Car:
    pass


class HasName(Protocol):
    name: str


def user_name() -> str:
    return "ada"


def compile_error(fn: Any) -> str:
    with pytest.raises(InvalidSignature) as info:
        Container().compile(fn)
    return str(info.value)


def test_wrong_return_type_is_refused_at_compile() -> None:
    async def handler(age: Annotated[int, Resolve(user_name)]) -> int:
        return age + 1

    message = compile_error(handler).replace(handler.__qualname__, "handler")
    assert_snapshot("type_mismatch", message)


async def test_wrong_yield_type_of_a_resource_is_refused(anyio_backend: str) -> None:
    async def connection() -> AsyncIterator[Car]:
        yield Car()

    async def deeper(dog: Annotated[Dog, Resolve(connection)]) -> Dog:
        return dog

    async def handler(d: Annotated[Dog, Resolve(deeper)]) -> Dog:
        return d

    container = Container()
    with pytest.raises(InvalidSignature) as info:
        await container.run(handler)
    message = str(info.value)
    assert "yields" in message and "Car" in message and "Dog" in message
    assert "path: " in message and "deeper(dog=...)" in message


def test_resource_managed_by_asynccontextmanager_is_checked() -> None:
    @asynccontextmanager
    async def session() -> AsyncIterator[str]:
        yield "s"

    async def handler(s: Annotated[int, Resolve(session)]) -> int:
        return s

    assert "yields str" in compile_error(handler)


def provides_dog() -> Dog:
    return Dog()


def provides_animal() -> Animal:
    return Dog()


def provides_optional_dog() -> Optional[Dog]:  # noqa: UP045
    return Dog()


def provides_int() -> int:
    return 1


def provides_list() -> list[int]:
    return [1]


def provides_gen() -> Iterator[list[str]]:
    yield ["a"]


def provides_any() -> Any:
    return 1


def provides_typevar(x: T = 1) -> T:  # type: ignore[assignment]
    return x


def unannotated():  # type: ignore[no-untyped-def]
    return 1


def provides_bool() -> bool:
    return True


VALID: list[tuple[Any, Any]] = [
    (Animal, provides_dog),  # a subclass
    (Dog, provides_animal),  # a declared base may still be the subclass
    (Dog, provides_optional_dog),
    (Optional[Dog], provides_dog),  # noqa: UP045
    (Union[Dog, Car], provides_dog),  # noqa: UP007
    (float, provides_int),  # the numeric tower
    (int, provides_bool),
    (list[str], provides_list),  # generics by origin
    (Sequence[int], provides_list),
    (list[str], provides_gen),
    (str, provides_any),
    (str, provides_typevar),
    (str, unannotated),
    (HasName, provides_int),  # protocols: not judged
    (Any, provides_int),
    (object, provides_int),
    (T, provides_int),
]


@pytest.mark.parametrize(("wanted", "provider"), VALID)
def test_compatible_or_unknown_types_compile(wanted: Any, provider: Any) -> None:
    async def handler(x: Annotated[wanted, Resolve(provider)]) -> None:  # type: ignore[valid-type]
        return None

    Container().compile(handler)


def test_registered_provider_found_by_type_is_not_second_guessed() -> None:
    container = Container()
    container.provide(provides_int, provides=str)

    async def handler(x: Annotated[str, Resolve()]) -> None:
        return None

    container.compile(handler)


async def test_an_override_fake_of_another_type_is_allowed(anyio_backend: str) -> None:
    container = Container()

    def fake_name() -> int:
        return 7

    async def handler(name: Annotated[str, Resolve(user_name)]) -> object:
        return name

    with container.override(user_name, fake_name):
        assert await container.run(handler) == 7


def test_context_manager_class_is_not_judged_by_its_class() -> None:
    class Connection:
        def __enter__(self) -> str:
            return "c"

        def __exit__(self, *exc: object) -> None:
            return None

    async def handler(c: Annotated[str, Resolve(Connection)]) -> None:
        return None

    Container().compile(handler)


def test_mismatch_between_app_scoped_resolvers() -> None:
    container = Container()

    @container.provider(scope=Scope.APP)
    def settings() -> Mapping[str, str]:
        return {}

    async def handler(s: Annotated[list[str], Resolve(settings)]) -> None:
        return None

    with pytest.raises(
        InvalidSignature, match=r"expects list\[str\].* returns Mapping\[str, str\]"
    ):
        container.compile(handler)


# -- property: no false positives, and unrelated concrete classes are caught -------------

CLASSES: list[type] = [int, bool, str, bytes, float, list, dict, Animal, Dog, Car, type(None)]
UNKNOWN: list[Any] = [Any, object, T, HasName]


def _union(members: list[Any]) -> Any:
    return members[0] if len(members) == 1 else Union[tuple(members)]  # noqa: UP007


@st.composite
def related_pair(draw: st.DrawFn) -> tuple[Any, Any]:
    """A provider type each of whose members is a subclass of some wanted member."""
    wanted = draw(st.lists(st.sampled_from(CLASSES), min_size=1, max_size=3))
    provided = [draw(st.sampled_from([c for c in CLASSES if issubclass(c, w)])) for w in wanted][
        : draw(st.integers(1, len(wanted)))
    ]
    return _union(wanted), _union(provided)


def _provider(annotation: Any) -> Any:
    def provider() -> None:
        return None

    provider.__annotations__ = {"return": annotation}
    return provider


def _compiles(wanted: Any, provided: Any) -> bool:
    async def handler(x: Annotated[wanted, Resolve(_provider(provided))]) -> None:  # type: ignore[valid-type]
        return None

    try:
        Container().compile(handler)
    except InvalidSignature:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(related_pair())
def test_related_types_always_compile(pair: tuple[Any, Any]) -> None:
    assert _compiles(*pair)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(CLASSES + UNKNOWN), min_size=1, max_size=3),
    st.lists(st.sampled_from(CLASSES + UNKNOWN), min_size=1, max_size=3),
)
def test_unknown_anywhere_always_compiles(wanted: list[Any], provided: list[Any]) -> None:
    assert _compiles(_union([*wanted, Any]), _union(provided))
    assert _compiles(_union(wanted), _union([*provided, HasName]))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([str, bytes, Car]), st.sampled_from([int, bool, float, Animal, Dog]))
def test_unrelated_concrete_types_are_refused(wanted: type, provided: type) -> None:
    assert not _compiles(wanted, provided)
    assert not _compiles(Optional[wanted], provided)  # noqa: UP045


# -- what type checkers accept: the numeric tower, generic models, Any subclasses --------


class Level(enum.IntEnum):
    LOW = 1


class Page(BaseModel, Generic[T]):
    items: list[T] = []


class User(BaseModel):
    name: str = "ada"


class Loose(Any):  # type checkers let an instance of it stand for anything
    pass


def _returns(annotation: Any) -> Any:
    def provider() -> Any:
        return None

    provider.__annotations__ = {"return": annotation}
    return provider


ACCEPTED: list[tuple[Any, Any]] = [
    (float, bool),  # a bool is an int, and a float may hold an int
    (float, Level),  # so is an IntEnum
    (complex, bool),
    (complex, Level),
    (complex, float),
    (float | None, bool),
    (Page[Any], Page[User]),  # pydantic generic models, by origin
    (Page[User], Page[Any]),
    (Page, Page[User]),
    (Page[User], Page),
    (Page[User], Page[int]),  # the arguments are not judged: origins match
    (Car, Loose),  # an Any subclass is unknown, on either side
    (Loose, int),
]


@pytest.mark.parametrize(("wanted", "provided"), ACCEPTED)
def test_what_type_checkers_accept_compiles(wanted: Any, provided: Any) -> None:
    async def handler(x: Annotated[wanted, Resolve(_returns(provided))]) -> None:  # type: ignore[valid-type]
        return None

    Container().compile(handler)


REFUSED: list[tuple[Any, Any]] = [
    (int, float),  # promotions go one way only
    (float, complex),
    (str, Level),
    (Level, str),
    (Page[User], User),  # a generic model is still compared with what is really there
    (User, Page[User]),
    (Page[Any], Car),
]


@pytest.mark.parametrize(("wanted", "provided"), REFUSED)
def test_what_is_really_wrong_is_still_refused_naming_both_types(
    wanted: Any, provided: Any
) -> None:
    async def handler(x: Annotated[wanted, Resolve(_returns(provided))]) -> None:  # type: ignore[valid-type]
        return None

    message = compile_error(handler)
    assert f"expects {type_name(wanted)}" in message
    assert f"returns {type_name(provided)}" in message


NUMERIC: list[type] = [bool, int, float, complex, Level, str, Car, Animal, Dog, type(None)]


def _checker_accepts(wanted: type, provided: type) -> bool:
    """Whether a type checker lets a *provided* value be a *wanted* one (PEP 484)."""
    tower = {float: (int,), complex: (int, float)}.get(wanted, ())
    return issubclass(provided, wanted) or issubclass(provided, tower)


def _mutually_unrelated(wanted: type, provided: type) -> bool:
    return not (
        _checker_accepts(wanted, provided)
        or issubclass(wanted, provided)  # a declared base may still be the subclass
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(NUMERIC), min_size=1, max_size=3),
    st.lists(st.sampled_from(NUMERIC), min_size=1, max_size=3),
)
def test_the_check_agrees_with_type_checkers(wanted: list[type], provided: list[type]) -> None:
    compiles = _compiles(_union(list(wanted)), _union(list(provided)))
    if all(any(_checker_accepts(w, p) for w in wanted) for p in provided):
        assert compiles  # never refuse what a type checker accepts
    if all(_mutually_unrelated(w, p) for w in wanted for p in provided):
        assert not compiles  # and refuse what can never fit
