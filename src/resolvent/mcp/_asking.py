"""Carrying a call's questions to the client over the protocol revision it negotiated: a
standalone server-to-client request (<= 2025-11-25) or an ``InputRequiredResult`` round.

It renders and parses through `_wire`; it never opens a scope or runs a call.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import is_version_at_least
from pydantic import ValidationError

from .. import InputRequired, InvalidAnswer
from .._integration import Outcome, Step
from ._wire import MALFORMED, parse_result, render, require_capability, result_type

__all__ = ("ask_over_back_channel", "input_required", "uses_input_required")

_INPUT_REQUIRED_VERSION = "2026-07-28"
_modern: dict[str | None, bool] = {}


def uses_input_required(version: str | None) -> bool:
    """True when this request's protocol carries questions in ``InputRequiredResult``."""
    found = _modern.get(version)
    if found is None:
        found = version is not None and is_version_at_least(version, _INPUT_REQUIRED_VERSION)
        if len(_modern) < 64:
            _modern[version] = found
    return found


async def ask_over_back_channel(ctx: Context[Any, Any], step: Step, question: Any) -> Outcome:
    """Ask *question* with a standalone server-to-client request (<= 2025-11-25)."""
    session = ctx.session
    if not session.can_send_request:
        raise _no_back_channel(step, render(question).method)
    require_capability(ctx, question, step.wire_key)
    try:
        result = await session.send_request(
            render(question),
            result_type(question),
            metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
        )
    except ValidationError:
        malformed = InvalidAnswer("the client sent a malformed answer", detail=MALFORMED)
        raise InvalidAnswer.at(step.name, step.wire_key, malformed, step.param) from None
    raw = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    try:
        return parse_result(question, raw)
    except InvalidAnswer as exc:
        raise InvalidAnswer.at(step.name, step.wire_key, exc, step.param) from None


def _no_back_channel(step: Step, method: str) -> MCPError:
    """The SDK's error for a request with no channel to the client (its code), saying
    which resolver asked and how to serve it."""
    where = f"{step.name} (for parameter {step.param!r})"
    return MCPError(
        code=types.INVALID_REQUEST,
        message=(
            f"{where} asks the client ({method!r}), but this request has no channel back to "
            "it: a client on a protocol before 2026-07-28 can only be asked over stateful "
            "streamable HTTP with SSE responses, stdio or SSE, and this server answers "
            "statelessly or in JSON. Serve stateful HTTP (behind a load balancer, with sticky "
            "sessions), or use a client on 2026-07-28, whose multi-round calls need no "
            "back channel and may land on any worker."
        ),
    )


def input_required(ctx: Context[Any, Any], pending: InputRequired) -> types.InputRequiredResult:
    """Batch this round's questions into one ``InputRequiredResult`` (2026-07-28+)."""
    requests: dict[str, types.InputRequest] = {}
    for key, question in pending.questions.items():
        require_capability(ctx, question, key)
        requests[key] = render(question)
    return types.InputRequiredResult(input_requests=requests, request_state=pending.state)
