"""Whether a plan's steps could overlap: two of them running at the same time in
concurrent mode, and the shape concurrent branches follow (`Branches`). Decided from the
steps alone (their kinds, scopes and inputs); it never runs a step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from .._reading.kinds import Kind
from .._vocabulary.scopes import Scope

__all__ = ("Branches", "on_loop", "overlaps")


class _Input(Protocol):
    @property
    def source(self) -> str: ...
    @property
    def step(self) -> int: ...


class Step(Protocol):
    """What is read of a step (`resolvent._graph.plan.Step`, which imports this module)."""

    @property
    def index(self) -> int: ...
    @property
    def kind(self) -> Kind: ...
    @property
    def inline(self) -> bool: ...
    @property
    def scope(self) -> Scope: ...
    @property
    def inputs(self) -> Sequence[_Input]: ...


def on_loop(step: Step) -> bool:
    """Whether *step* runs on the event loop without waiting (a plain function run
    inline, in the CALL scope): no other step could run while it does."""
    return step.kind is Kind.SYNC and step.inline and step.scope is Scope.CALL


def overlaps(steps: Sequence[Step]) -> bool:
    """Whether two of *steps* (dependencies first) could run at the same time: two that
    may wait (any step but one `on_loop`) and of which neither feeds the other, directly
    or through others. Without such a pair, concurrent branches would run the steps one
    after another, in the order they come, exactly as the sequential code does.

    The steps that may wait must then form one chain, each an ancestor of the next.
    While those seen so far do, the ones among a step's ancestors are a first part of
    that chain, so one number per step (how long that part is) tells: a step that may
    wait must have every earlier one among its ancestors. Linear in steps and inputs,
    so a 10,000-step chain costs nothing to decide.
    """
    reach: dict[int, int] = {}  # by index: how many waiting steps are it or its ancestors
    seen = 0  # waiting steps so far, in order
    for step in steps:
        depth = max((reach[i.step] for i in step.inputs if i.source == "step"), default=0)
        if not on_loop(step):
            if depth < seen:  # an earlier waiting step is not among its ancestors
                return True
            seen = depth = seen + 1
        reach[step.index] = depth
    return False


S = TypeVar("S", bound=Step)


class Branches(Generic[S]):
    """A plan's steps as concurrent branches follow them, worked out once per plan
    (`Plan.branches`) instead of on every call: each step by its index (a slot), how
    many steps each one waits for (a call counts down a copy), the steps each one
    feeds, and whether any two could overlap. Read only, shared by every call."""

    __slots__ = (
        "call_resources",
        "dependents",
        "first",
        "on_loop",
        "overlaps",
        "steps",
        "waiting",
    )

    def __init__(self, steps: Sequence[S]) -> None:
        self.steps = {step.index: step for step in steps}
        self.waiting: dict[int, int] = {}
        self.dependents: dict[int, list[int]] = {index: [] for index in self.steps}
        for step in steps:
            feeds = {i.step for i in step.inputs if i.source == "step"}
            self.waiting[step.index] = len(feeds)
            for dep in feeds:
                self.dependents[dep].append(step.index)
        # The steps ready at the start (no inputs from other steps), in order.
        self.first = tuple(index for index, count in self.waiting.items() if count == 0)
        # The steps `on_loop`, which nothing could overlap.
        self.on_loop = frozenset(step.index for step in steps if on_loop(step))
        # Whether a step is a CALL resource, whose setup and teardown share a task.
        self.call_resources = any(s.kind.is_resource and s.scope is Scope.CALL for s in steps)
        self.overlaps = overlaps(steps)
