"""Starting a container: the checks integrations ask its lifespan to run on the server it
starts (the MCP guard), and creating APP values up front. It never compiles a plan."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any, cast

from ._cache import LiveScope
from ._errors import ResolventError
from ._interpreter import run_step
from ._plan import Plan

__all__ = ("register_start_check", "run_start_checks", "start_values")

EMPTY: MappingProxyType[Any, Any] = MappingProxyType({})

_START_CHECKS: list[Callable[[Any], None]] = []


def register_start_check(check: Callable[[Any], None]) -> None:
    """Run *check(server)* whenever a container's lifespan starts (resolvent.mcp's guard)."""
    if check not in _START_CHECKS:
        _START_CHECKS.append(check)


def run_start_checks(server: Any) -> None:
    """Run the registered checks on *server* (None: no server, nothing to check)."""
    if server is None:
        return
    checks = list(_START_CHECKS)
    if any(cls.__module__.partition(".")[0] == "mcp" for cls in type(server).__mro__):
        # An MCP server (the SDK is loaded, since it exists): its guard runs even if the
        # server module never imported resolvent.mcp, as one that forgot @inject does not.
        from .mcp._guard import check_if_server

        if check_if_server not in checks:
            checks.append(check_if_server)
    for check in checks:
        check(server)


async def start_values(plan: Plan, app: LiveScope) -> None:
    """Create the APP values of *plan* (see `PlanCache.for_start`) in *app*, in plan order.

    Raises:
        ResolventError: a value failed to start, naming it; the cause is its ``__cause__``.
    """
    vals: dict[int, Any] = {}  # by step index
    for step in plan.steps:
        try:
            vals[step.index] = await run_step(step, vals, cast(Any, None), EMPTY, EMPTY, app, None)
        except Exception as error:
            raise ResolventError(
                f"{step.name} ({step.scope!r}) failed to start: "
                f"{type(error).__name__}: {error}\n"
                f"  path: {plan.path_to(step.index)}\n"
                f"  fix: the cause printed above was raised inside {step.name}; fix it "
                "and start again (the next start or call that needs it tries again)"
            ) from error
