"""Questions on the MCP wire: the SDK's markers taught to the core, rendered as MCP requests.

Importing this module registers, once:

- the SDK's ``Elicit``, ``Sample`` and ``ListRoots`` as question kinds (digest, parse, ask);
- the SDK's outcome classes (``AcceptedElicitation`` ...) as an outcome family, so a consumer
  annotated with them receives SDK objects;
- the SDK's ``Resolve`` marker, so tools written for the SDK's resolvers work unchanged.

Everything here renders or checks one question; carrying it to the client lives in
`_asking`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import mcp_types as types
from mcp.server.elicitation import (
    AcceptedElicitation,
    CancelledElicitation,
    DeclinedElicitation,
    render_elicitation_schema,
)
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resolve import Elicit as SdkElicit
from mcp.server.mcpserver.resolve import ListRoots, Sample
from mcp.server.mcpserver.resolve import Resolve as SdkResolve
from mcp.server.validation import wants_sampling_tools
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError

from .. import Accepted, Cancelled, Declined, Elicit, InvalidAnswer, Resolve
from .._integration import (
    Asker,
    Outcome,
    QuestionKind,
    digest_json,
    normalize_outcome,
    parse_elicit_answer,
    register_outcome_family,
    register_question,
    register_resolve_marker,
)

__all__ = ("AnyQuestion", "ListRoots", "Sample", "parse_result", "render", "require_capability")

AnyQuestion = Elicit[Any] | SdkElicit[Any] | Sample | ListRoots
"""Every question a resolver may return to an MCP tool."""

ResultType = (
    type[types.ElicitResult]
    | type[types.CreateMessageResult]
    | type[types.CreateMessageResultWithTools]
    | type[types.ListRootsResult]
)


def render(
    question: Any,
) -> types.ElicitRequest | types.CreateMessageRequest | types.ListRootsRequest:
    """The MCP request that asks *question*: the same shape on both transports."""
    if isinstance(question, Elicit | SdkElicit):
        message, schema = _form(question)
        return types.ElicitRequest(
            params=types.ElicitRequestFormParams(
                message=message, requested_schema=render_elicitation_schema(schema)
            )
        )
    if isinstance(question, Sample):
        return types.CreateMessageRequest(params=question.params)
    return types.ListRootsRequest()


def _form(question: Any) -> tuple[str, type[BaseModel]]:
    """The message and schema of an elicitation (ours or the SDK's)."""
    return question.message, question.schema


def result_type(question: Any) -> ResultType:
    """The result model the client's answer to *question* must validate against."""
    if isinstance(question, Sample):
        params = question.params
        if wants_sampling_tools(params.tools, params.tool_choice):
            return types.CreateMessageResultWithTools
        return types.CreateMessageResult
    if isinstance(question, ListRoots):
        return types.ListRootsResult
    return types.ElicitResult


def _rendered_digest(question: Any) -> str:
    request = render(question)
    params = request.params
    dumped = params.model_dump(mode="json", by_alias=True, exclude_none=True) if params else None
    return digest_json({"method": request.method, "params": dumped})


def parse_result(question: Any, raw: Any) -> Outcome:
    """Turn a JSON-shaped answer to *question* into a core outcome.

    Raises:
        InvalidAnswer: the answer is of the wrong kind or does not fit the schema; the
            message never repeats the answer's content.
    """
    if isinstance(question, SdkElicit):
        return _parse_sdk_elicit(_form(question)[1], raw)
    if isinstance(question, Elicit):
        return parse_elicit_answer(_form(question)[1], raw, "the question")
    if not isinstance(raw, Mapping):
        raise InvalidAnswer(WRONG_KIND)
    try:
        return _accepted(result_type(question).model_validate(raw))
    except ValidationError:
        raise InvalidAnswer(WRONG_KIND) from None


# The SDK's own words for a bad answer; the adapter puts "Resolver '<wire key>'" before them.
WRONG_KIND = "received a response of the wrong kind"
NOT_ELICITATION = "received a non-elicitation response"
NO_CONTENT = "received an accepted elicitation with no content"
SCHEMA_MISMATCH = (
    "received an accepted elicitation whose content does not match the requested schema"
)
MALFORMED = "received an invalid elicitation response"


def _parse_sdk_elicit(schema: type[BaseModel], raw: Any) -> Outcome:
    """An answer to the SDK's ``Elicit``, judged (and worded) as the SDK's resolvers do."""
    empty: Mapping[str, Any] = {}
    answer = cast("Mapping[str, Any]", raw) if isinstance(raw, Mapping) else empty
    action = answer.get("action")
    if action == "decline":
        return Declined()
    if action == "cancel":
        return Cancelled()
    if action != "accept":
        raise InvalidAnswer(NOT_ELICITATION)
    content = answer.get("content")
    if content is None:
        raise InvalidAnswer(NO_CONTENT)
    try:
        return _accepted(schema.model_validate(content))
    except ValidationError:  # pydantic's text would repeat the content: never shown
        raise InvalidAnswer(SCHEMA_MISMATCH) from None


async def _ask_sdk_elicit(asker: Asker, question: SdkElicit[Any]) -> Outcome:
    schema: type[BaseModel] = question.schema
    return normalize_outcome(await asker(question.message, schema), schema, "the asker")


register_question(
    SdkElicit, QuestionKind(digest=_rendered_digest, parse=parse_result, ask=_ask_sdk_elicit)
)
register_question(Sample, QuestionKind(digest=_rendered_digest, parse=parse_result, ask=None))
register_question(ListRoots, QuestionKind(digest=_rendered_digest, parse=parse_result, ask=None))


def _to_sdk_outcome(outcome: Outcome) -> Any:
    if isinstance(outcome, Accepted):
        # The bare class, as the SDK's own resolvers build it for an answered question.
        sdk_accepted = cast(type[AcceptedElicitation[Any]], AcceptedElicitation)
        return sdk_accepted.model_construct(data=outcome.data)
    if isinstance(outcome, Declined):
        return DeclinedElicitation()
    assert isinstance(outcome, Cancelled)
    return CancelledElicitation()


register_outcome_family(
    (AcceptedElicitation, DeclinedElicitation, CancelledElicitation), _to_sdk_outcome
)


def _from_sdk_resolve(marker: Any) -> Resolve:
    assert isinstance(marker, SdkResolve)
    return Resolve(marker.fn)


register_resolve_marker(SdkResolve, _from_sdk_resolve)


def require_capability(ctx: Context[Any, Any], question: Any, key: str) -> None:
    """Fail like the SDK when the client did not declare what *question* needs.

    Raises:
        MCPError: code -32021 (missing required client capability) with a
            ``requiredCapabilities`` payload.
    """
    capabilities = ctx.client_capabilities
    if isinstance(question, Sample):
        sampling = capabilities.sampling if capabilities is not None else None
        tools = wants_sampling_tools(question.params.tools, question.params.tool_choice)
        if sampling is not None and (not tools or sampling.tools is not None):
            return
        required = types.ClientCapabilities(
            sampling=types.SamplingCapability(
                tools=types.SamplingToolsCapability() if tools else None
            )
        )
        name = "sampling.tools" if tools else "sampling"
    elif isinstance(question, ListRoots):
        if capabilities is not None and capabilities.roots is not None:
            return
        required = types.ClientCapabilities(roots=types.RootsCapability())
        name = "roots"
    else:
        elicitation = capabilities.elicitation if capabilities is not None else None
        # A bare `elicitation: {}` (before modes existed) means form support; url-only does not.
        if elicitation is not None and (elicitation.form is not None or elicitation.url is None):
            return
        required = types.ClientCapabilities(
            elicitation=types.ElicitationCapability(form=types.FormElicitationCapability())
        )
        name = "form elicitation"
    data = types.MissingRequiredClientCapabilityErrorData(required_capabilities=required)
    raise MCPError(
        code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"Client did not declare the {name} capability required by resolver {key!r}",
        data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


def _accepted(data: Any) -> Accepted[Any]:
    """Wrap a value as accepted without validating it again."""
    return Accepted[Any].model_construct(data=data)
