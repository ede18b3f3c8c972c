"""One call scope, many uses: every CALL value is made once per call scope, whatever
runs in it (several functions one after another, several tasks at once), and its
resources keep their promises (teardown in order, every finally in full), in every
execution mode and on both backends."""

from collections.abc import AsyncIterator
from typing import Annotated

import anyio
import pytest

from modes import MODES, make_container
from resolvent import Call, Container, Resolve


def open_call(container: Container, mode: str) -> Call:
    """A call scope as *mode* says ("interpreter": a multi-round call)."""
    return container.call(rounds=mode == "interpreter")


# -- several functions, one after another, in one call ---------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_resolver_shared_by_several_functions_runs_once_per_call(mode: str) -> None:
    container = make_container(mode)
    events: list[str] = []

    async def user() -> str:
        events.append("user")
        return "ada"

    async def tx() -> AsyncIterator[str]:
        events.append("tx open")
        yield "tx"
        events.append("tx commit")

    async def first(u: Annotated[str, Resolve(user)]) -> str:
        return f"first {u}"

    async def second(u: Annotated[str, Resolve(user)], t: Annotated[str, Resolve(tx)]) -> str:
        return f"second {u} {t}"

    async def third(t: Annotated[str, Resolve(tx)], u: Annotated[str, Resolve(user)]) -> str:
        return f"third {t} {u}"

    async def fourth(u: Annotated[str, Resolve(user)]) -> str:
        return f"fourth {u}"

    for _ in range(2):  # each call scope makes its own values, once
        events.clear()
        async with open_call(container, mode) as call:
            assert await call.run(first) == "first ada"
            assert await call.run(second) == "second ada tx"
            assert await call.resolve(third) == {"t": "tx", "u": "ada"}
            assert await call.run(fourth) == "fourth ada"
            assert await call.run(third) == "third tx ada"
            assert events == ["user", "tx open"]
        assert events == ["user", "tx open", "tx commit"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_shared_resolver_runs_once_on_a_concurrent_call(mode: str) -> None:
    """`container.call(concurrent=True)` on any container: branches of several plans."""
    container = make_container(mode)
    made: list[str] = []

    async def user() -> str:
        made.append("user")
        await anyio.sleep(0)
        return "ada"

    async def perms(u: Annotated[str, Resolve(user)]) -> str:
        made.append("perms")
        return f"{u}:rw"

    async def a(u: Annotated[str, Resolve(user)], p: Annotated[str, Resolve(perms)]) -> str:
        return f"{u} {p}"

    async def b(p: Annotated[str, Resolve(perms)]) -> str:
        return p

    async with container.call(concurrent=True, rounds=mode == "interpreter") as call:
        assert await call.run(a) == "ada ada:rw"
        assert await call.run(b) == "ada:rw"
        assert await call.run(a) == "ada ada:rw"
    assert made == ["user", "perms"]
