"""Test helpers: a pytest plugin for per-test provider overrides.

Installing resolvent registers this module as a pytest plugin (entry point
``resolvent``), so the ``resolvent_override`` fixture is available in every test without
an import. It returns a function ``override(container, target, replacement)`` that swaps a
provider (by function or by provided type) for *replacement* until the test ends:

```python
async def fake_db() -> Database:
    return InMemoryDatabase()


async def test_handler_uses_the_fake(resolvent_override):
    resolvent_override(container, get_db, fake_db)
    assert await container.run(handler) == "..."
```

It is `Container.override` with the undo done at test teardown (overrides made in one
test are undone in reverse order): plans compiled before the test see the replacement,
the replacement keeps the target's scope unless it is registered with its own, and
values cached for the original are not used while the override is active. The override
applies to the test's own context (and the tasks it starts), so a second call does not
rebuild the first fake. At teardown the resources built from a replacement are closed:
in an anyio test (one that uses the ``anyio_backend`` fixture, as ``@pytest.mark.anyio``
does) every kind, awaited like ``async with container.override(...)``; in a sync test,
sync ones (an async APP/SESSION resource is refused there, as in a plain ``with``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from ._integration import enter_override, settle

if TYPE_CHECKING:
    from . import Container
    from ._integration import OverrideBlock

__all__ = ("Override", "resolvent_override")


class Override(Protocol):
    """The function the ``resolvent_override`` fixture returns."""

    def __call__(
        self, container: Container, target: Any, replacement: Callable[..., Any]
    ) -> None: ...


@pytest.fixture
def resolvent_override(request: pytest.FixtureRequest) -> Iterator[Override]:
    """Override providers for the current test: ``resolvent_override(c, target, fake)``."""
    if "anyio_backend" in request.fixturenames:
        # An anyio test: its async fixtures and body run in one runner task. Enter each
        # block there (from a sync fixture too), so the test sees it, and leave it there
        # at teardown, awaited, closing every resource built from the replacement.
        from anyio.pytest_plugin import extract_backend_and_options, get_runner

        blocks: list[OverrideBlock] = request.getfixturevalue("_resolvent_override_closer")
        backend, options = extract_backend_and_options(request.getfixturevalue("anyio_backend"))

        async def enter(block: OverrideBlock) -> None:
            enter_override(block)

        def override(container: Container, target: Any, replacement: Callable[..., Any]) -> None:
            block = container.override(target, replacement)
            # The closer fixture holds the runner open, so this is the test's runner.
            with get_runner(backend, options) as runner:
                if _in_event_loop(backend):  # called from the test or an async fixture
                    enter_override(block)
                else:  # called from a sync fixture
                    runner.run_fixture(enter, {"block": block})
            blocks.append(block)

        yield override
        return
    with contextlib.ExitStack() as stack:

        def override_sync(
            container: Container, target: Any, replacement: Callable[..., Any]
        ) -> None:
            stack.enter_context(container.override(target, replacement))

        yield override_sync


def _in_event_loop(backend: str) -> bool:
    """Whether this code runs inside the test runner's event loop (the test body or an
    async fixture) rather than from a sync fixture, between the loop's turns.

    The same check as anyio's ``TestRunner.is_running``, which only anyio 4.14 and later
    have; asking the event loop directly works on every anyio this package supports.
    """
    if backend == "trio":
        import trio

        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            return False
        return True
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@pytest.fixture
async def _resolvent_override_closer() -> AsyncIterator[list[OverrideBlock]]:
    """The blocks an anyio test entered through ``resolvent_override``, left (and their
    resources closed, awaited) at its teardown, last entered first."""
    blocks: list[OverrideBlock] = []
    yield blocks
    errors: list[BaseException] = []
    for block in reversed(blocks):
        try:
            await block.__aexit__(None, None, None)
        except Exception as error:
            errors.append(error)
    settle(None, errors)
