"""Registration: what a provider offers, resources decided at compile time, re-registration."""

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Annotated, Any

import pytest

from modes import MODES, make_container, run
from resolvent import Container, InvalidSignature, Resolve, Scope


class Db:
    def __init__(self, name: str = "db") -> None:
        self.name = name


def test_provide_and_provider_return_the_function_unchanged() -> None:
    container = Container()

    async def one() -> Db:
        return Db()

    assert container.provide(one, scope=Scope.APP) is one

    @container.provider(scope=Scope.SESSION)
    async def two() -> int:
        return 2

    assert two.__name__ == "two"


def test_scope_must_be_a_scope() -> None:
    async def one() -> Db:
        return Db()

    with pytest.raises(TypeError, match=r"resolvent\.Scope"):
        Container().provide(one, scope="app")  # type: ignore[arg-type]


async def test_async_generator_annotation_forms_are_found_by_yielded_type() -> None:
    container = Container()
    log: list[str] = []

    @container.provider()
    async def db() -> AsyncGenerator[Db, None]:
        yield Db("agen")
        log.append("closed db")

    @container.provider()
    def number() -> Generator[int, None, None]:
        yield 5
        log.append("closed number")

    async def handler(d: Annotated[Db, Resolve()], n: Annotated[int, Resolve()]) -> str:
        return f"{d.name}{n}"

    assert await container.run(handler) == "agen5"
    assert sorted(log) == ["closed db", "closed number"]


class Pool:
    """What a resource annotated with the yielded class itself gives."""


@pytest.mark.parametrize("mode", MODES)
async def test_a_generator_annotated_with_what_it_yields_is_found_by_that_type(
    mode: str,
) -> None:
    # `async def pool() -> Pool: yield ...`: type checkers want AsyncIterator[Pool], but
    # it can only mean what it yields. Resolve() finds it by Pool (it used to say that
    # no provider offers Pool, whose fix was to register the provider it had), and a
    # consumer of another type is refused as for any resource.
    container = make_container(mode)
    log: list[str] = []

    @container.provider(scope=Scope.APP)
    async def pool() -> Pool:  # type: ignore[misc]
        yield Pool()
        log.append("closed pool")

    @container.provider()
    def number() -> int:  # type: ignore[misc]
        yield 5
        log.append("closed number")

    async def handler(p: Annotated[Pool, Resolve()], n: Annotated[int, Resolve()]) -> str:
        return f"{type(p).__name__}{n}"

    async with container:
        assert await run(container, handler, mode) == "Pool5"
        assert log == ["closed number"]
    assert log == ["closed number", "closed pool"]

    async def wrong(n: Annotated[str, Resolve(number)]) -> str:
        return n

    with pytest.raises(InvalidSignature, match="expects str, but its resolver"):
        container.compile(wrong)


async def test_context_manager_providers_are_resources() -> None:
    container = Container()
    log: list[str] = []

    @container.provider()
    @contextlib.asynccontextmanager
    async def db() -> AsyncIterator[Db]:
        log.append("enter db")
        yield Db("acm")
        log.append("exit db")

    @container.provider()
    @contextlib.contextmanager
    def number() -> Iterator[int]:
        log.append("enter number")
        yield 1
        log.append("exit number")

    class Managed(contextlib.AbstractAsyncContextManager["Managed"]):
        async def __aenter__(self) -> "Managed":
            log.append("enter managed")
            return self

        async def __aexit__(self, *exc: object) -> None:
            log.append("exit managed")

    def managed() -> contextlib.AbstractAsyncContextManager[Managed]:
        return Managed()

    def unannotated_cm():  # type: ignore[no-untyped-def]
        return Managed()

    async def handler(
        d: Annotated[Db, Resolve()],
        n: Annotated[int, Resolve()],
        m: Annotated[Managed, Resolve(managed)],
        raw: Annotated[object, Resolve(unannotated_cm)],
    ) -> str:
        log.append("body")
        assert isinstance(m, Managed)
        assert isinstance(raw, Managed)  # not entered: injected as the object itself
        return d.name

    assert await container.run(handler) == "acm"
    assert log.index("body") < log.index("exit db")
    assert log.count("enter managed") == 1 and log.count("exit managed") == 1
    assert {"exit db", "exit number"} <= set(log)


async def test_class_can_be_a_provider() -> None:
    container = Container()

    @container.provider()
    async def name() -> str:
        return "from provider"

    class Repo:
        def __init__(self, n: Annotated[str, Resolve(name)]) -> None:
            self.n = n

    container.provide(Repo)

    async def handler(r: Annotated[Repo, Resolve()]) -> str:
        return r.n

    assert await container.run(handler) == "from provider"


async def test_re_registering_replaces_the_previous_registration() -> None:
    container = Container()

    async def db() -> Db:
        return Db("again")

    container.provide(db, scope=Scope.APP)
    container.provide(db, scope=Scope.CALL)

    async def handler(d: Annotated[Db, Resolve()]) -> str:
        return d.name

    # Not "two providers offer Db": the second registration replaced the first ...
    assert await container.run(handler) == "again"
    # ... and its scope is the one in force.
    assert container.compile(handler).steps[0].scope is Scope.CALL


def test_provides_replaces_the_return_annotation_for_lookup() -> None:
    container = Container()

    @container.provider(provides=Db)
    async def make() -> object:
        return Db()

    async def by_object(o: Annotated[object, Resolve()]) -> None: ...

    async def by_db(d: Annotated[Db, Resolve()]) -> None: ...

    container.compile(by_db)
    with pytest.raises(InvalidSignature, match="no provider offers it"):
        container.compile(by_object)


def test_registered_scope_applies_to_resolve_fn_too() -> None:
    container = Container()

    @container.provider(scope=Scope.APP)
    async def db() -> Db:
        return Db()

    async def handler(d: Annotated[Db, Resolve(db)]) -> None: ...

    assert container.compile(handler).steps[0].scope is Scope.APP


def test_unregistered_resolver_is_call_scoped() -> None:
    container = Container()

    def plain() -> int:
        return 1

    async def handler(v: Annotated[int, Resolve(plain)]) -> None: ...

    step = container.compile(handler).steps[0]
    assert step.scope is Scope.CALL
    assert step.threaded


def test_two_resolve_markers_on_one_parameter() -> None:
    async def a() -> int:
        return 1

    async def handler(v: Annotated[int, Resolve(a), Resolve(a)]) -> None: ...

    with pytest.raises(InvalidSignature, match="more than one Resolve marker"):
        Container().compile(handler)


def test_not_callable_marker_target() -> None:
    async def handler(v: Annotated[int, Resolve(42)]) -> None: ...  # type: ignore[arg-type]

    with pytest.raises(InvalidSignature, match="not callable"):
        Container().compile(handler)


async def test_a_wraps_decorator_around_a_generator_is_a_generator_resource() -> None:
    import functools

    closed: list[str] = []

    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    @logged
    def numbers() -> Iterator[int]:
        yield 1
        closed.append("numbers")

    @contextlib.contextmanager
    def managed() -> Iterator[int]:
        yield 2

    async def handler(
        a: Annotated[int, Resolve(numbers)], b: Annotated[int, Resolve(managed)]
    ) -> tuple[int, int]:
        return a, b

    container = Container()
    # Read through the wrapper, the generator is a resource like its undecorated twin
    # (and not mistaken for a @contextmanager factory).
    assert await container.run(handler) == (1, 2)
    assert closed == ["numbers"]
