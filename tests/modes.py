"""The execution modes a feature is tried in, shared by the tests that sweep them."""

from collections.abc import Callable
from typing import Any

from resolvent import Container, Session

# generated plan, the interpreter (a multi-round call), concurrent branches, call_timeout
MODES = ["generated", "interpreter", "concurrent", "timeout"]


def make_container(mode: str) -> Container:
    """A container set up for *mode*."""
    options = {"concurrent": {"concurrent": True}, "timeout": {"call_timeout": 30}}
    container = Container(**options.get(mode, {}))
    if mode == "generated":
        # A plan's first calls are interpreted, then its code generated (see
        # `cold_runner`); this mode runs the generated code from the first call, and
        # the interpreter mode covers the interpreter.
        container._plans.tiered = False
    return container


async def run(runner: Container | Session, handler: Callable[..., Any], mode: str) -> Any:
    """Run *handler* the way *mode* says; "interpreter" is a multi-round call."""
    if mode == "interpreter":
        async with runner.call(rounds=True) as call:
            return await call.run(handler)
    return await runner.run(handler)
