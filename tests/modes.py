"""The execution modes a feature is tried in, shared by the tests that sweep them."""

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from resolvent import Container, Session

# Generated code from the first call; a multi-round call ("interpreter": the generated
# code up to a question with no answer, then the interpreter); concurrent branches (a plan
# with nothing to overlap takes a default container's path: its first calls interpreted,
# `cold_runner`); a call scope with a deadline.
MODES = ["generated", "interpreter", "concurrent", "timeout"]


def make_container(mode: str) -> Container:
    """A container set up for *mode*."""
    options = {"concurrent": {"concurrent": True}, "timeout": {"call_timeout": 30}}
    container = Container(**options.get(mode, {}))
    if mode == "generated":
        # A plan's first calls are interpreted, then its code generated (see
        # `cold_runner`); this mode runs the generated code from the first call.
        container._plans.tiered = False
    return container


async def run(runner: Container | Session, handler: Callable[..., Any], mode: str) -> Any:
    """Run *handler* the way *mode* says; "interpreter" is a multi-round call."""
    if mode == "interpreter":
        async with runner.call(rounds=True) as call:
            return await call.run(handler)
    return await runner.run(handler)


def pairwise(argnames: Sequence[str], *factors: Sequence[Any]) -> pytest.MarkDecorator:
    """Parametrize *argnames* with rows in which every two values of any two factors meet
    at least once (all pairs), instead of every combination.

    For a promise whose factors interact two at a time (a framework's route and an
    execution mode; a mode and a backend), not as a whole: ``pairwise(("framework",
    "mode", "backend"), FRAMEWORKS, MODES, BACKENDS)`` is 6 rows, not 12. The rows are
    chosen greedily, in a fixed order, so a run's ids are stable.
    """
    couples = list(itertools.combinations(range(len(factors)), 2))

    def pairs(row: tuple[Any, ...]) -> set[tuple[int, Any, int, Any]]:
        return {(i, row[i], j, row[j]) for i, j in couples}

    candidates = list(itertools.product(*factors))
    uncovered = set().union(*(pairs(row) for row in candidates))
    rows: list[tuple[Any, ...]] = []
    while uncovered:
        best = max(candidates, key=lambda row: len(pairs(row) & uncovered))
        rows.append(best)
        uncovered -= pairs(best)
    params = [pytest.param(*row, id="-".join(map(str, row))) for row in rows]
    return pytest.mark.parametrize(tuple(argnames), params)
