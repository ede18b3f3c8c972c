"""How resolvent's errors reach the SDK and the client: a compile error as the SDK's
``InvalidSignature`` too, a failed call as the error the SDK shows for its kind of request.

Everything here builds or words an error; it never runs a call or asks a question.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import InvalidSignature as SdkInvalidSignature
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.resolve import Resolve as SdkResolve
from mcp.server.mcpserver.resolve import build_resolver_plans, find_resolved_parameters
from mcp.shared.exceptions import MCPError

from .. import InvalidAnswer, InvalidSignature, Plan, StateError, StoreUnavailable
from .._integration import lenient_hints
from ._wire import NO_CONTENT, SCHEMA_MISMATCH

__all__ = (
    "TWO_FLOWS",
    "McpInvalidSignature",
    "as_mcp_error",
    "refusal",
    "sdk_answer_text",
    "state_refusal",
    "uses_sdk_markers",
)


class McpInvalidSignature(InvalidSignature, SdkInvalidSignature):
    """An injected MCP handler cannot be compiled: catchable as either library's error.

    Code written against the SDK's resolvers catches the SDK's ``InvalidSignature``;
    resolvent code catches its own. Under `inject` both work.
    """


TWO_FLOWS = (
    "a call has one input_required channel, so the multi-round flow is driven either by "
    "resolvers or by the tool body, not both"
)


def as_mcp_error(exc: InvalidSignature, fn: Callable[..., Any]) -> McpInvalidSignature:
    """*exc* as an error the SDK's ``except InvalidSignature`` catches too.

    For a tool written against the SDK's markers, the SDK's own verdict on *fn* heads the
    message (so code and tests matching the SDK's wording keep working) and resolvent's
    path and fix follow it.
    """
    message = str(exc)
    headline = _sdk_verdict(fn) if uses_sdk_markers(fn) else None
    if headline is not None:
        message = f"{headline}\n  {message}"
    error = McpInvalidSignature(message, path=exc.path, offending=exc.offending)
    if hasattr(exc, "__notes__"):
        error.__notes__ = list(exc.__notes__)
    return error


def _sdk_verdict(fn: Callable[..., Any]) -> str | None:
    """What the SDK's own registration says is wrong with *fn*'s resolvers, if anything."""
    try:
        resolved = find_resolved_parameters(fn)
        arguments = set(inspect.signature(fn).parameters) - set(resolved)
        build_resolver_plans(resolved, arguments)
    except SdkInvalidSignature as exc:
        return str(exc)
    except Exception:  # what the SDK cannot even read, resolvent has already explained
        return None
    return None


def uses_sdk_markers(fn: Callable[..., Any]) -> bool:
    """True when a parameter of *fn* carries the SDK's own ``Resolve`` marker (anywhere)."""
    return any(_has_sdk_marker(hint) for hint in _hints(fn).values())


def _has_sdk_marker(hint: Any) -> bool:
    if typing.get_origin(hint) is typing.Annotated:
        if any(isinstance(meta, SdkResolve) for meta in hint.__metadata__):
            return True
        hint = hint.__origin__
    return any(_has_sdk_marker(arg) for arg in typing.get_args(hint))


def sdk_answer_text(exc: InvalidAnswer, resolver: str, modern: bool) -> str:
    """A bad answer worded as the SDK's resolvers word it, naming the resolver's key."""
    detail = exc.detail
    if modern and detail.startswith("received "):
        return f"Resolver {resolver!r} {detail}"
    if not modern and detail in (NO_CONTENT, SCHEMA_MISMATCH):
        # The SDK's standalone request reports the SDK's own ValueError text here.
        detail = detail[0].upper() + detail[1:]
    return f"Resolver {resolver!r}: {detail}"


def refusal(ctx: Context[Any, Any] | None, text: str) -> Exception:
    """The error whose *text* the SDK shows the client for this kind of request."""
    if ctx is None:  # called outside a request (MCPServer.call_tool() directly)
        return ToolError(text)
    method = ctx.request_context.method
    if method == "prompts/get":  # the SDK hides every prompt failure but MCPError
        return MCPError(code=types.INVALID_PARAMS, message=text)
    if method == "resources/read":
        return ResourceError(text)
    return ToolError(text)


def state_refusal(ctx: Context[Any, Any] | None, plan: Plan, exc: StateError) -> Exception:
    """A state handle not found (or a conflict) as an error the client reads; one log line.

    An unavailable store is the server's trouble, not the caller's: a warning names the
    store and the cause (the traceback at DEBUG), the client reads only that the store is
    unavailable and to retry.
    """
    import logging

    log = logging.getLogger("resolvent")
    if isinstance(exc, StoreUnavailable):
        log.warning("resolvent: %s: %s", plan.name, str(exc).split("\n")[0])
        log.debug("resolvent: %s: the store's error", plan.name, exc_info=exc)
        return refusal(ctx, exc.brief)
    log.info("resolvent: %s: %s", plan.name, str(exc).split("\n")[0])
    return refusal(ctx, str(exc))


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """*fn*'s annotations, each read on its own (a name imported only under
    TYPE_CHECKING does not stop the others); the core says what it needs of them."""
    return lenient_hints(fn)[0]
