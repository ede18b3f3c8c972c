"""The internal interface the integrations (mcp/, starlette and _starlette/, asgi, testing,
_state/, _tools/) use to reach containers, plans, calls and the core; it holds no logic of
its own and never imports one."""

# Each name here is what an integration may rely on beyond the public `resolvent` package.
# How a plan starts with no scope object (cold or hot, which generated variant, overrides
# in effect, the ready table, the calling convention) is one policy, `Launcher`'s: an
# integration asks it, and never decides any of that itself. The few functions left reach
# into the container's private state on the integrations' behalf, so that this module is
# the one place to update when that state moves.
# pyright: reportPrivateUsage=false

from __future__ import annotations

from ._container.container import Container
from ._container.launch import Launcher
from ._container.overrides import OverrideBlock
from ._container.startup import register_start_check
from ._graph.plan import Step
from ._graph.registry import IMPLICIT_SCOPE, LASTING
from ._reading.annotations import (
    argument_converter,
    argument_parameters,
    instance_parameter,
    lenient_hints,
    shown_hints,
    type_name,
    with_article,
)
from ._reading.kinds import is_inline
from ._reading.params import RESOLVE_MARKERS, register_resolve_marker
from ._runtime.cache import LiveScope
from ._runtime.home import spawn_home
from ._runtime.kept import Kept
from ._runtime.teardown import settle
from ._stores import StateKey, StateStore, redact
from ._stores.memory import MemoryStore
from ._stores.opener import open_store
from ._vocabulary.errors import (
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
from ._vocabulary.log import logger
from ._vocabulary.markers import HANDLER, INJECTED, Resolve, inline, is_settling, settles
from ._vocabulary.questions import (
    Asker,
    Outcome,
    QuestionKind,
    digest_json,
    normalize_outcome,
    parse_elicit_answer,
    register_outcome_family,
    register_question,
)
from ._vocabulary.scopes import Scope

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
    "argument_converter",
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
