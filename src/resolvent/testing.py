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
rebuild the first fake; sync resources of a replacement close at teardown.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from ._container import Container

__all__ = ("Override", "resolvent_override")


class Override(Protocol):
    """The function the ``resolvent_override`` fixture returns."""

    def __call__(
        self, container: Container, target: Any, replacement: Callable[..., Any]
    ) -> None: ...


@pytest.fixture
def resolvent_override() -> Iterator[Override]:
    """Override providers for the current test: ``resolvent_override(c, target, fake)``."""
    with contextlib.ExitStack() as stack:

        def override(container: Container, target: Any, replacement: Callable[..., Any]) -> None:
            stack.enter_context(container.override(target, replacement))

        yield override
