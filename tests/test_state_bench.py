"""The state benchmark's implementations compute the same thing before anything is timed."""

import contextlib

import pytest

pytest.importorskip("mcp")

from benchmarks import state_tools
from benchmarks.runner import verify


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("store", ["memory", "SQLite"])
async def test_state_scenarios_verify(store: str) -> None:
    (scenario,) = [s for s in state_tools.scenarios() if s.key == f"State {store}"]
    async with contextlib.AsyncExitStack() as stack:
        for name, factory in scenario.factories.items():
            instance = await factory(stack)
            assert not isinstance(instance, str), f"{name}: {instance}"
            assert await verify(instance, scenario) == scenario.verify_calls
