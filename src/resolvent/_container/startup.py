"""Starting a container: the checks integrations ask its lifespan to run on the server it
starts (the MCP guard), and creating APP values up front. It never compiles a plan."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncGenerator, Callable
from types import TracebackType
from typing import Any, cast

from .._engine.interpreter import run_step
from .._graph.plan import Plan
from .._runtime.cache import LiveScope
from .._vocabulary.errors import ResolventError
from .launch import EMPTY, app_and_call

__all__ = ("register_start_check", "run_start_checks", "start_values", "starting")

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
        from .mcp_guard import check_if_server

        if check_if_server not in checks:
            checks.append(check_if_server)
    for check in checks:
        check(server)


async def start_values(plan: Plan, app: LiveScope) -> None:
    """Create the APP values of *plan* (see `PlanCache.for_start`) in *app*, in plan order.

    Raises:
        ResolventError: a value failed to start. Its last line names the provider and the
            cause, once; the original exception is its ``__context__``, not printed with it
            (the whole chain is logged at DEBUG on the ``resolvent`` logger).
    """
    vals: dict[int, Any] = {}  # by step index
    for step in plan.steps:
        try:
            scopes = app_and_call(app)
            vals[step.index] = await run_step(step, vals, cast(Any, None), EMPTY, EMPTY, scopes)
        except Exception as error:
            from .._vocabulary.log import logger  # only when something failed

            logger.debug("resolvent: %s failed to start", step.name, exc_info=error)
            said, more = cause_of(error)
            # The cause's own advice, if it has some (a store's "fix: start the server").
            fix = more or (
                "  fix: remove the cause on the last line, then start again (the next start "
                "or call that needs it tries again)\n"
            )
            raise ResolventError(
                "an APP value failed to start (the 'resolvent' logger has the whole "
                f"traceback at DEBUG)\n  path: {plan.path_to(step.index)}\n{fix}"
                f"{step.name} ({step.scope!r}) failed to start: {said}"
            ) from None


def leaves_of(error: BaseException) -> list[BaseException]:
    """The exceptions inside *error*, in order, exception groups opened (itself if none)."""
    leaves: list[BaseException] = []
    pending = [error]
    while pending:
        found = pending.pop(0)
        if isinstance(found, BaseExceptionGroup):
            pending[:0] = cast("BaseExceptionGroup[BaseException]", found).exceptions
        else:
            leaves.append(found)
    return leaves


def cause_of(error: BaseException) -> tuple[str, str]:
    """What *error* says: its first line as ``Type: text`` and the lines after it (each
    ending in a newline), looking inside exception groups (an async client's task group
    wraps the error that matters) for the errors they hold."""
    leaves = leaves_of(error)
    if len(leaves) == 1:
        first, _, rest = str(leaves[0]).partition("\n")
        said = f"{type(leaves[0]).__name__}: {first}" if first else type(leaves[0]).__name__
        return said, f"{rest}\n" if rest.strip() else ""
    shown = "; ".join(f"{type(e).__name__}: {str(e).partition(chr(10))[0]}" for e in leaves)
    return f"{len(leaves)} errors: {shown}", ""


# -- a program that a failed start ends ---------------------------------------------------


@contextlib.asynccontextmanager
async def starting(
    container: contextlib.AbstractAsyncContextManager[Any], server: Any
) -> AsyncGenerator[None]:
    """A container's lifespan: the start checks on *server*, then the open *container*.

    If starting fails and the failure ends the program, Python prints it alone: a stdio
    server's start runs inside the SDK's task group, which wraps it in an exception group
    whose traceback (some 60 lines of the SDK and anyio) hides the one line that matters.
    """
    stack = contextlib.AsyncExitStack()
    try:
        run_start_checks(server)
        await stack.enter_async_context(container)
    except Exception as error:
        _said_alone_at_exit(error)
        raise
    async with stack:
        yield


_FATAL: list[BaseException] = []  # the start failures the hook prints alone (a few at most)
_PREVIOUS: list[Callable[[type[BaseException], BaseException, TracebackType | None], Any]] = []


def _said_alone_at_exit(error: Exception) -> None:
    """If *error* ends the program (uncaught, alone or in exception groups), print it
    alone: its type, by its public name, and its message. Only over Python's own hook,
    and not in development mode (``python -X dev``), which shows the whole traceback."""
    if sys.flags.dev_mode:
        return
    if not _PREVIOUS:
        if sys.excepthook is not sys.__excepthook__:  # someone else's hook: leave it be
            return
        _PREVIOUS.append(sys.excepthook)
        sys.excepthook = _excepthook
    del _FATAL[:-3]
    _FATAL.append(error)


def _excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    leaves = leaves_of(value)
    if not all(any(leaf is fatal for fatal in _FATAL) for leaf in leaves):
        _PREVIOUS[0](kind, value, tb)
        return
    import traceback

    print("resolvent: the server did not start (python -X dev shows the whole traceback):",
          file=sys.stderr)  # fmt: skip
    for leaf in leaves:
        print("".join(traceback.format_exception_only(leaf)), end="", file=sys.stderr)
