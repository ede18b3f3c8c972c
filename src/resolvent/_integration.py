"""The internal interface the integrations (mcp/, starlette, testing, _state, _cli) use to reach
containers, plans, calls and the core; it holds no logic of its own and never imports one."""

# Each name here is what an integration may rely on beyond the public `resolvent` package.
# The functions reach into the core's private state on the integrations' behalf, so that
# this module is the one place to update when that state moves. Where an integration's
# per-call path reads something, it takes the object once (`ready_table`, `override_state`)
# or gets a C-level getter (`app_scope`), so no Python frame is added per call.
# pyright: reportPrivateUsage=false

from __future__ import annotations

import operator
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from ._annotations import (
    argument_parameters,
    instance_parameter,
    lenient_hints,
    shown_hints,
    type_name,
    with_article,
)
from ._cache import LiveScope
from ._compiler import Overrides
from ._container import Container
from ._errors import (
    AnswerTimeout,
    CallTimeout,
    InvalidSignature,
    ResolventError,
    StateConflict,
    StateError,
    StateNotFound,
    StateTooLarge,
    StoreUnavailable,
)
from ._executor import is_cold
from ._home import spawn_home
from ._log import logger
from ._markers import HANDLER, INJECTED, Resolve, inline, is_inline, is_settling, settles
from ._overrides import OverrideBlock
from ._plan import Plan, Step
from ._plans import Starter
from ._plans import check_scopes as _check_scopes
from ._questions import (
    Asker,
    Outcome,
    QuestionKind,
    digest_json,
    normalize_outcome,
    parse_elicit_answer,
    register_outcome_family,
    register_question,
)
from ._registry import IMPLICIT_SCOPE, LASTING
from ._scopes import Scope
from ._signature import RESOLVE_MARKERS, register_resolve_marker
from ._startup import register_start_check
from ._stores import StateKey, StateStore, redact
from ._stores.memory import MemoryStore
from ._stores.opener import open_store
from ._teardown import Kept, settle

__all__ = (
    "HANDLER",
    "IMPLICIT_SCOPE",
    "INJECTED",
    "LASTING",
    "RESOLVE_MARKERS",
    "AnswerTimeout",
    "Asker",
    "CallTimeout",
    "InvalidSignature",
    "Kept",
    "LiveScope",
    "MemoryStore",
    "Outcome",
    "OverrideBlock",
    "QuestionKind",
    "Resolve",
    "ResolventError",
    "Scope",
    "StateConflict",
    "StateError",
    "StateKey",
    "StateNotFound",
    "StateStore",
    "StateTooLarge",
    "Step",
    "StoreUnavailable",
    "app_scope",
    "argument_parameters",
    "check_scopes",
    "current_plan",
    "digest_json",
    "enter_override",
    "forget_plans",
    "inline",
    "instance_parameter",
    "is_cold",
    "is_inline",
    "is_settling",
    "kept_start",
    "lenient_hints",
    "logger",
    "normalize_outcome",
    "on_hot",
    "open_store",
    "override_state",
    "parse_elicit_answer",
    "ready_table",
    "redact",
    "register_outcome_family",
    "register_question",
    "register_resolve_marker",
    "register_start_check",
    "settle",
    "settles",
    "shown_hints",
    "spawn_home",
    "type_name",
    "with_article",
)

# -- containers ------------------------------------------------------------------------------

app_scope: Callable[[Container], LiveScope | None] = operator.attrgetter("_app")
"""*container*'s open APP scope, or None: what generated code takes as its ``app``.

A C-level getter, cheap enough for an integration's per-call path."""


def ready_table(container: Container) -> dict[Any, Starter]:
    """*container*'s table of checked plans that start with no scope object.

    `Container.run` reads it by function (its entries take ``(kwargs)``); an
    integration may keep its own entries in it, keyed by an object of its own, and look
    its key up once per call. The container empties it
    whenever an entry may be wrong (a new provider or value type, ``concurrent`` or
    ``call_timeout`` changed, the APP scope closing). The same dict for the container's
    life: take it once.
    """
    return container._ready


def override_state(container: Container) -> tuple[list[int], ContextVar[Overrides | None]]:
    """*container*'s override blocks: (the blocks open in any task, a list used as a
    counter; the context variable holding the ones open in this context).

    Both are the same objects for the container's life: take them once, and on the
    per-call path test ``blocks and var.get() is not None`` (a block applies here).
    """
    return container._overridden, container._override_var


def current_plan(container: Container, plan: Plan) -> Plan:
    """*plan*, or its function's plan compiled again if the providers or the overrides
    in this context changed since *plan* was compiled."""
    return container._current(plan)


def check_scopes(container: Container, plan: Plan) -> None:
    """Refuse *plan* (`ResolventError`, saying how to fix it) if it needs a scope that is not
    open: APP values outside ``async with container``, SESSION values outside a session."""
    _check_scopes(plan, container._app, None)


def forget_plans(container: Container) -> None:
    """Drop every plan *container* compiled, as registering a provider does."""
    container._plans.invalidate()


def enter_override(block: OverrideBlock) -> None:
    """Enter *block* as ``async with`` would (leaving it closes every kind of resource),
    from code that cannot await: a pytest fixture that enters it in the test's task."""
    block._enter(plain=False)


# -- plans ------------------------------------------------------------------------------------


def kept_start(plan: Plan) -> Callable[..., Any] | None:
    """*plan*'s generated ``kept`` function, made now: ``direct`` that leaves the CALL
    resources open in the `Kept` it takes as its *call*, for the caller to close later;
    None if a resource of *plan* needs a call scope (see `direct_shape`)."""
    return plan.code.function(plan, "kept")


def on_hot(plan: Plan, callback: Callable[[Callable[..., Any]], None]) -> None:
    """Call *callback(run_fn)* once *plan*, interpreted while cold (see `is_cold`), has its
    code generated: *run_fn* then replaces the plan's cold ``run_fn``/``direct_fn``."""
    plan.when_hot(callback)
