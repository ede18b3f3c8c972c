"""The context-variable rules: what a resolver or resource sets is seen by the caller.

Owns copying, adopting and undoing context changes; never starts a task or a thread.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ("InContext", "Restore", "adopt", "keep")

if TYPE_CHECKING:
    _S = TypeVar("_S")
_UNSET: Any = object()


# The rule (docs/concepts.md, "Context variables"): a CALL resolver or resource runs as if
# called in the caller's task, so what it sets in context variables is seen by the
# resolvers after it and by the handler. Where it really runs elsewhere (a worker thread,
# a branch or holder task), it runs in a copy of the caller's context and what it set is
# copied back (`adopt`). A sync resource's set-up and teardown run in one context of its
# own (`InContext`), so `token = var.set(x); yield; var.reset(token)` works wherever its
# teardown is called from. APP and SESSION values start in their home task: what their
# set-up sets stays there.


def adopt(base: contextvars.Context, changed: contextvars.Context) -> list[contextvars.Token[Any]]:
    """Set in the current context what *changed* set since it was copied from *base*.

    Returns the tokens, to undo it (see `Restore`). Costs one comparison when nothing
    was set.
    """
    if changed == base:
        return []
    return [var.set(value) for var, value in changed.items() if base.get(var, _UNSET) is not value]


class InContext:
    """A sync resource with a context of its own: set-up and teardown both run there.

    Its teardown may run in another task or thread than its set-up did (a worker
    thread per hop; a scope closed from another task), and a context variable token is
    valid only in the context that made it.
    """

    __slots__ = ("base", "context", "obj")

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.base = contextvars.copy_context()
        self.context = self.base.copy()


class Restore:
    """At a call's close, undo what `adopt` set in the caller's context for a resource.

    So a variable a resource sets around its ``yield`` is back to the caller's value
    after the call, as after a ``with`` block. A token made in another task's context
    (a branch that has finished) has nothing to undo here.
    """

    __slots__ = ("tokens",)

    def __init__(self, tokens: list[contextvars.Token[Any]]) -> None:
        self.tokens = tokens

    def undo(self) -> None:
        for token in reversed(self.tokens):
            with contextlib.suppress(ValueError):  # made in another context
                token.var.reset(token)


def keep(
    exits: list[tuple[_S, Any]],
    step: _S,
    base: contextvars.Context,
    changed: contextvars.Context,
) -> None:
    """Adopt what resource *step*'s set-up set; undo it when *exits* close."""
    tokens = adopt(base, changed)
    if tokens:
        exits.append((step, Restore(tokens)))
