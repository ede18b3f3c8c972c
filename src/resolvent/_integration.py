"""The internal interface the integrations (mcp/, starlette, testing, _state, _cli) use to reach
containers, plans, calls and the core; it holds no logic of its own and never imports one."""

# Each name here is what an integration may rely on beyond the public `resolvent` package.
# How a plan starts with no scope object (cold or hot, which generated variant, overrides
# in effect, the ready table, the calling convention) is one policy, `Launcher`'s: an
# integration asks it, and never decides any of that itself. The few functions left reach
# into the container's private state on the integrations' behalf, so that this module is
# the one place to update when that state moves.
# pyright: reportPrivateUsage=false

from __future__ import annotations

from ._annotations import (
    argument_parameters,
    instance_parameter,
    lenient_hints,
    shown_hints,
    type_name,
    with_article,
)
from ._cache import LiveScope
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
from ._home import spawn_home
from ._launch import Launcher
from ._log import logger
from ._markers import HANDLER, INJECTED, Resolve, inline, is_inline, is_settling, settles
from ._overrides import OverrideBlock
from ._plan import Step
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
    "Launcher",
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
    "argument_parameters",
    "digest_json",
    "enter_override",
    "forget_plans",
    "inline",
    "instance_parameter",
    "is_inline",
    "is_settling",
    "lenient_hints",
    "logger",
    "normalize_outcome",
    "open_store",
    "parse_elicit_answer",
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


def forget_plans(container: Container) -> None:
    """Drop every plan *container* compiled, as registering a provider does."""
    container._plans.invalidate()


def enter_override(block: OverrideBlock) -> None:
    """Enter *block* as ``async with`` would (leaving it closes every kind of resource),
    from code that cannot await: a pytest fixture that enters it in the test's task."""
    block._enter(plain=False)
