"""trio's own rules at the edges of a program: Ctrl-C, and a program that ends with the
container still open."""

import signal
import time
from collections.abc import AsyncIterator, Iterator
from typing import Annotated

import anyio
import pytest

from resolvent import Container, Resolve, Scope


@pytest.fixture
def anyio_backend() -> str:
    return "trio"  # asyncio has no KeyboardInterrupt protection to get in the way


@pytest.fixture(autouse=True)
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt, as in a program started from a terminal.

    A process started in the background by a shell without job control starts with
    SIGINT ignored: Python then installs no handler, nor does trio, and Ctrl-C is lost.
    Set before trio starts, so trio takes SIGINT over as it does in a program.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("scope", [Scope.APP, Scope.SESSION, Scope.CALL])
async def test_ctrl_c_interrupts_a_blocking_set_up_at_once(scope: Scope) -> None:
    log: list[str] = []
    container = Container()

    @container.provider(scope=scope)
    async def settings() -> str:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C while the set-up blocks
        for _ in range(20):
            time.sleep(0.005)  # blocking: no checkpoint where trio could deliver it
        log.append("the set-up went on after Ctrl-C")
        return "s"

    async def handler(s: Annotated[str, Resolve(settings)]) -> str:
        return s

    # trio's handler, not Python's: it raises only where KeyboardInterrupt protection is
    # off, which is what this test is about.
    handler_of_ctrl_c = signal.getsignal(signal.SIGINT)
    assert callable(handler_of_ctrl_c) and handler_of_ctrl_c is not signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        async with container, container.session() as session:
            await session.run(handler)
    assert log == []


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_program_ending_with_the_container_open_raises_its_own_error(backend: str) -> None:
    """An APP resource holding a task group, and a program that ends (with its own error)
    without closing the container: the event loop's shutdown closes the resource, and the
    program's error comes out, not the event loop's complaint about the resource's scopes
    (trio: ``TrioInternalError``)."""
    log: list[str] = []
    container = Container()

    @container.provider(scope=Scope.APP)
    async def worker() -> AsyncIterator[str]:
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.sleep_forever)
            try:
                yield "worker"
            finally:
                log.append("worker closed")
                group.cancel_scope.cancel()

    async def handler(w: Annotated[str, Resolve(worker)]) -> str:
        return w

    async def program() -> None:
        await container.__aenter__()  # never left: the program ends first
        assert await container.run(handler) == "worker"
        raise LookupError("the program's own error")

    with pytest.raises(LookupError, match="the program's own error"):
        anyio.run(program, backend=backend)
    assert log == ["worker closed"]
