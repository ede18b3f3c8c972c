"""Cold start: plans that share resolvers share their readings, and stay correct."""

from typing import Annotated, Any

import pytest

import resolvent._registry as registry_module
from resolvent import Container, Resolve, inline
from resolvent._signature import RESOLVE_MARKERS, register_resolve_marker


async def shared() -> int:
    return 1


async def middle(s: Annotated[int, Resolve(shared)]) -> int:
    return s + 1


def _handlers(n: int) -> list[Any]:
    out = []
    for i in range(n):

        async def handler(m: Annotated[int, Resolve(middle)], i: int = i) -> int:
            return m + i

        out.append(handler)
    return out


def test_a_resolver_used_by_many_plans_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[Any] = []
    real = registry_module.read_function

    def counting(fn: Any) -> Any:
        read.append(fn)
        return real(fn)

    monkeypatch.setattr(registry_module, "read_function", counting)
    container = Container()
    for handler in _handlers(20):
        container.compile(handler)
    assert read.count(middle) == 1
    assert read.count(shared) == 1


async def test_marking_a_resolver_inline_later_is_honoured() -> None:
    def plain() -> int:
        return 2

    async def first(p: Annotated[int, Resolve(plain)]) -> int:
        return p

    async def second(p: Annotated[int, Resolve(plain)]) -> int:
        return p

    container = Container()
    assert not container.compile(first).steps[0].inline
    inline(plain)
    assert container.compile(second).steps[0].inline
    async with container:
        assert await container.run(second) == 2


async def test_a_marker_registered_later_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    class OtherResolve:
        """Another library's marker, honoured only once registered."""

        def __init__(self, fn: Any) -> None:
            self.fn = fn

    async def leaf() -> int:
        return 3

    async def uses_other(x: Annotated[int, OtherResolve(leaf)] = 0) -> int:
        return x

    async def first(v: Annotated[int, Resolve(uses_other)]) -> int:
        return v

    async def second(v: Annotated[int, Resolve(uses_other)]) -> int:
        return v

    container = Container()
    async with container:
        assert await container.run(first) == 0  # the unknown marker: the default
        monkeypatch.setitem(RESOLVE_MARKERS, OtherResolve, lambda m: Resolve(m.fn))
        del RESOLVE_MARKERS[OtherResolve]  # registered the public way, undone at the end
        register_resolve_marker(OtherResolve, lambda m: Resolve(m.fn))
        assert await container.run(second) == 3
