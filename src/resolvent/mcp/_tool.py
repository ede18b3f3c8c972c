"""`inject`: turn a function with resolvent dependencies into an MCPServer tool, prompt or
resource function.

The wrapper shows the SDK only the caller-facing parameters (and a `Context` parameter when
the plan needs the request), compiles the dependency graph once, and on every
``tools/call``, ``prompts/get`` or ``resources/read``:

1. picks the SESSION scope (the connection's, a keyed one, or one for this request);
2. opens a CALL scope with the request's `Context` as a framework value;
3. answers questions over the negotiated transport: a standalone server-to-client
   request (protocol <= 2025-11-25), or an ``InputRequiredResult`` round (2026-07-28+);
4. maps resolvent's errors onto the SDK's (`ToolError`, ``MCPError`` -32021).
"""

# The adapter is part of resolvent: its hot path starts a compiled plan directly, as
# Container.run does, which needs the container's private APP scope.
# pyright: reportPrivateUsage=false

from __future__ import annotations

import functools
import inspect
import typing
import weakref
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

import mcp_types as types
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import InvalidSignature as SdkInvalidSignature
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.resolve import Resolve as SdkResolve
from mcp.server.mcpserver.resolve import (
    build_resolver_plans,
    find_resolved_parameters,
    returns_input_required,
)
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import is_version_at_least
from pydantic import ValidationError

from .. import (
    Container,
    InputRequired,
    InvalidAnswer,
    InvalidSignature,
    NotAccepted,
    Plan,
    Scope,
    StateError,
)
from .._integration import (
    AnswerTimeout,
    CallTimeout,
    Outcome,
    Step,
    app_scope,
    argument_parameters,
    check_scopes,
    current_plan,
    is_cold,
    lenient_hints,
    on_hot,
    override_state,
    ready_table,
    shown_hints,
)
from ._guard import INJECTED
from ._sessions import SessionTable, close_entries, connection_of
from ._wire import (
    MALFORMED,
    NO_CONTENT,
    SCHEMA_MISMATCH,
    parse_result,
    render,
    require_capability,
    result_type,
)

__all__ = ("inject",)


class McpInvalidSignature(InvalidSignature, SdkInvalidSignature):
    """An injected MCP handler cannot be compiled: catchable as either library's error.

    Code written against the SDK's resolvers catches the SDK's ``InvalidSignature``;
    resolvent code catches its own. Under `inject` both work.
    """


_TWO_FLOWS = (
    "a call has one input_required channel, so the multi-round flow is driven either by "
    "resolvers or by the tool body, not both"
)

F = TypeVar("F", bound=Callable[..., Any])

_INPUT_REQUIRED_VERSION = "2026-07-28"
_DEFAULT_MAX_SESSIONS = 1024
_DEFAULT_IDLE_TIMEOUT = 3600.0
_CONTEXT_NAMES = ("ctx", "context", "mcp_context", "resolvent_context")

_tables: weakref.WeakKeyDictionary[Container, SessionTable] = weakref.WeakKeyDictionary()
_NO_VALUES: dict[Any, Any] = {}  # read only: a plan that takes no Context reads no values
_modern: dict[str | None, bool] = {}


def _uses_input_required(version: str | None) -> bool:
    """True when this request's protocol carries questions in ``InputRequiredResult``."""
    found = _modern.get(version)
    if found is None:
        found = version is not None and is_version_at_least(version, _INPUT_REQUIRED_VERSION)
        if len(_modern) < 64:
            _modern[version] = found
    return found


def _table(container: Container, max_sessions: int | None, idle: float | None) -> SessionTable:
    table = _tables.get(container)
    if table is None:
        table = _tables[container] = SessionTable(
            container, _DEFAULT_MAX_SESSIONS, _DEFAULT_IDLE_TIMEOUT
        )
    if max_sessions is not None:
        table.max_sessions = max_sessions
    if idle is not None:
        table.idle_timeout = idle
    return table


def inject(
    container: Container,
    *,
    session_key: Callable[[Context[Any, Any]], Hashable] | None = None,
    max_sessions: int | None = None,
    session_idle_timeout: float | None = None,
) -> Callable[[F], F]:
    """Make *fn*'s resolvent dependencies work as an MCPServer tool, prompt or resource.

    ```python
    @server.tool()
    @inject(container)
    async def add_note(text: str, db: Annotated[Db, Resolve(db)], ctx: Context) -> str: ...
    ```

    Put it under ``@server.tool()``, ``@server.prompt()`` or ``@server.resource(uri)``.
    The handler advertises only its caller-facing parameters; injected ones are resolved
    per ``tools/call``, ``prompts/get`` or ``resources/read`` (CALL scope), per MCP
    session (SESSION scope) or once for the server lifespan (APP scope: pass
    ``lifespan=container.lifespan`` to `MCPServer`). `Context` reaches the handler and any
    resolver by type. Questions (`Elicit`, `Sample`, `ListRoots`)
    are asked over the protocol the session negotiated.

    Args:
        container: the container holding the providers.
        session_key: for protocol revisions without sessions (2026-07-28), a function of
            the `Context` returning a hashable key (an authenticated principal, a
            header); SESSION values are shared by key. Without it, SESSION values live
            for one request there.
        max_sessions: how many keyed SESSION scopes (*session_key*) the container keeps
            at most (default 1024); beyond it the least recently used idle one is
            closed, and one with a call in progress only once that call ends. A
            connection's SESSION scope is not counted: it lives exactly as long as its
            connection (bound connections at the transport, e.g. the SDK's
            ``streamable_http_app(max_sessions=...)``). Applies to the whole container.
        session_idle_timeout: seconds after which an unused keyed SESSION scope is
            closed, whether or not other requests arrive (default one hour). Applies
            to the whole container.

    Raises:
        InvalidSignature: the dependency graph cannot be compiled (at decoration).
    """
    container.add_value_type(Context)
    table = _table(container, max_sessions, session_idle_timeout)

    def decorate(fn: F) -> F:
        return typing.cast(F, _Tool(container, table, session_key, fn).wrapper)

    return decorate


class _Tool:
    """One injected tool: its fixed wire signature and its per-call path."""

    def __init__(
        self,
        container: Container,
        table: SessionTable,
        session_key: Callable[[Context[Any, Any]], Hashable] | None,
        fn: Callable[..., Any],
    ) -> None:
        self.container = container
        self.table = table
        self.session_key = session_key
        self.fn = fn
        try:
            plan = container.compile(fn)
        except McpInvalidSignature:
            raise
        except InvalidSignature as exc:
            raise _as_mcp_error(exc, fn) from exc.__cause__
        if plan.steps and returns_input_required(fn):
            raise McpInvalidSignature(
                f"Tool {getattr(fn, '__name__', plan.name)!r} ({plan.name}) combines "
                f"Resolve(...) parameters with an InputRequiredResult return; {_TWO_FLOWS}."
                "\n  fix: ask through resolvers (Elicit, Sample, ListRoots), or return "
                "InputRequiredResult yourself from a tool without resolvers"
            )
        self.plan = plan
        # Written for the SDK's resolvers: the client sees the SDK's words for its errors.
        self.sdk_wording = _uses_sdk_markers(fn)
        self._flags(plan)
        self.ctx_name = _context_name(plan)
        self.ctx_declared = self.ctx_name in {i.name for i in plan.inputs}
        # A handler that needs nothing from the request takes no Context: the SDK refuses
        # one on a static resource, which is called with no arguments at all.
        self.takes_ctx = Context in plan.value_types or self.asks or self.uses_session
        self.wrapper = self._make_wrapper(plan)

    def _flags(self, plan: Plan) -> None:
        self.plan = plan
        self.asks = any(step.may_ask for step in plan.steps)
        self.uses_session = Scope.SESSION in plan.scopes
        self.needs_app = bool(plan.scopes - {Scope.CALL})
        # CALL resources too, when the generated code sets them up and tears them down
        # itself (as Container.run starts such a plan): no scope object needed.
        resources_inline = not plan.needs_call or plan.direct_fn is not None
        self.direct = resources_inline and not self.asks and not self.uses_session
        direct = plan.direct_fn if plan.needs_call else None
        self.start = direct if direct is not None else plan.run_fn
        if is_cold(self.start):  # interpreted until hot: then start the generated code
            on_hot(plan, functools.partial(self._hot, plan))

    def _hot(self, plan: Plan, function: Callable[..., Any]) -> None:
        if self.plan is plan:  # not a plan an override or a new provider replaced since
            ready = ready_table(self.container)
            if ready.get(self) is self.start:
                ready[self] = function
            self.start = function

    def _make_wrapper(self, plan: Plan) -> Callable[..., Awaitable[Any]]:
        fn = self.fn
        hints = shown_hints(fn, plan.arguments)
        params = argument_parameters(fn, plan.arguments, hints)
        if self.takes_ctx:
            ctx_annotation = hints.get(self.ctx_name, Context) if self.ctx_declared else Context
            params.append(
                inspect.Parameter(
                    self.ctx_name, inspect.Parameter.KEYWORD_ONLY, annotation=ctx_annotation
                )
            )
        returns = hints.get("return", inspect.Signature.empty)
        run = self.run
        container = self.container
        # The container's table of checked plans that start with no scope object (what
        # `Container.run` reads): `run` enters this tool once a call took that path; the
        # container empties it whenever the answer may change (a new provider, value
        # type, `concurrent` or `call_timeout`, the APP scope closing).
        ready = ready_table(container)
        blocks, overrides = override_state(container)
        tool, takes_ctx, ctx_name, body = self, self.takes_ctx, self.ctx_name, fn
        own_flow = types.InputRequiredResult

        async def wrapper(**kwargs: Any) -> Any:
            start = ready.get(tool)
            if start is None or (blocks and overrides.get() is not None):
                return await run(kwargs)
            # The hot path, in this one frame: no questions, no SESSION values, no scope
            # object; what `run` checked holds until the table is emptied.
            ctx = kwargs.pop(ctx_name, None) if takes_ctx else None
            try:
                result = await start(
                    kwargs, {Context: ctx} if takes_ctx else _NO_VALUES, None, app_scope(container),
                    None, body,
                )  # fmt: skip
            except StateError as exc:
                raise _state_refusal(ctx, tool.plan, exc) from None
            if isinstance(result, own_flow):
                return tool._own_result(result)
            return result

        annotations: dict[str, Any] = {
            p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty
        }
        if returns is not inspect.Signature.empty:
            annotations["return"] = returns
        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            value = getattr(fn, attribute, None)
            if value is not None:
                setattr(wrapper, attribute, value)
        wrapper.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
        wrapper.__annotations__ = annotations
        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        setattr(wrapper, INJECTED, True)
        return wrapper

    async def run(self, kwargs: dict[str, Any]) -> Any:
        """One ``tools/call``, ``prompts/get`` or ``resources/read`` (one round of it)."""
        ctx: Context[Any, Any] | None = kwargs.pop(self.ctx_name, None)
        container = self.container
        plan = current_plan(container, self.plan)  # recompiled only for an override or new provider
        if plan is not self.plan:
            self._flags(plan)
        if self.direct and not container.concurrent and container.call_timeout is None:
            # No questions, no CALL resources, no SESSION values: no scope object needed.
            if self.needs_app:
                check_scopes(container, plan)
            if plan.overrides is None:  # the wrapper starts it itself from now on
                ready_table(container)[self] = self.start
            try:
                result = await self.start(
                    kwargs, {Context: ctx}, None, app_scope(container), None, self.fn
                )
            except StateError as exc:
                raise _state_refusal(ctx, plan, exc) from None
            return self._own_result(result)
        if ctx is None:  # needs nothing from the request: no questions, no SESSION
            call = container.call()
            try:
                return await self._run_call(call, ctx, plan, kwargs, False)
            except CallTimeout as exc:
                raise _refusal(ctx, exc.brief) from None
            except StateError as exc:
                raise _state_refusal(ctx, plan, exc) from None
        modern = _uses_input_required(ctx.protocol_version)
        rounds = modern and self.asks
        answers: dict[str, Any] | None = None
        state: str | None = None
        if rounds:
            responses = ctx.input_responses
            if responses:
                answers = {
                    key: value.model_dump(mode="json", by_alias=True, exclude_none=True)
                    for key, value in responses.items()
                }
            state = ctx.request_state
        values = {Context: ctx}
        try:
            if not self.uses_session:
                call = container.call(values=values, rounds=rounds, answers=answers, state=state)
                return await self._run_call(call, ctx, plan, kwargs, modern)
            return await self._run_in_session(ctx, plan, kwargs, modern, answers, state)
        except NotAccepted as exc:
            if self.sdk_wording:
                text = (
                    f"Resolver for parameter {exc.parameter!r} could not resolve: "
                    f"elicitation was {exc.action}"
                )
                raise _refusal(ctx, text) from None
            raise _refusal(ctx, str(exc)) from None
        except InvalidAnswer as exc:
            if self.sdk_wording and exc.resolver is not None:
                raise _refusal(ctx, _sdk_answer_text(exc, exc.resolver, modern)) from None
            raise _refusal(ctx, str(exc)) from None
        except (CallTimeout, AnswerTimeout) as exc:
            # Expected, not a crash: the client reads what ran out of time and the bound,
            # the server logs one line (a traceback per timed-out call costs real CPU).
            raise _refusal(ctx, exc.brief) from None
        except StateError as exc:
            raise _state_refusal(ctx, plan, exc) from None

    async def _run_in_session(
        self,
        ctx: Context[Any, Any],
        plan: Plan,
        kwargs: dict[str, Any],
        modern: bool,
        answers: dict[str, Any] | None,
        state: str | None,
    ) -> Any:
        values = {Context: ctx}
        rounds = modern and self.asks
        key: Hashable | None = None
        connection = None
        if modern:
            if self.session_key is not None:
                key = ("key", self.session_key(ctx))
        else:
            connection = connection_of(ctx)
            if connection is not None:
                key = ("connection", id(connection))
        if key is None:  # no session on this transport: SESSION lives for the request
            async with self.container.session() as session:
                call = session.call(values=values, rounds=rounds, answers=answers, state=state)
                return await self._run_call(call, ctx, plan, kwargs, modern)
        entry, victims = self.table.acquire(key, connection)
        try:
            if victims:
                await close_entries(victims)
            call = entry.session.call(values=values, rounds=rounds, answers=answers, state=state)
            return await self._run_call(call, ctx, plan, kwargs, modern)
        finally:
            self.table.release(entry)

    async def _run_call(
        self,
        call: Any,
        ctx: Context[Any, Any] | None,
        plan: Plan,
        kwargs: dict[str, Any],
        modern: bool,
    ) -> Any:
        if self.asks and not modern and ctx is not None:
            call.answerer = functools.partial(_ask_over_back_channel, ctx)
        async with call:
            try:
                # A sync handler runs in a worker thread (unless marked `inline`), as
                # the SDK runs a sync tool: the core does it, the same in every mode.
                return self._own_result(await call.run(plan, **kwargs))
            except InputRequired as pending:
                # Not a failure: this round ends cleanly and its resources close normally.
                assert ctx is not None  # a plan that asks always takes the Context
                return _input_required(ctx, pending)

    def _own_result(self, result: Any) -> Any:
        """*result* of the tool body, refused when it takes over the resolvers' rounds."""
        if isinstance(result, types.InputRequiredResult) and self.plan.steps:
            # Registration refuses the annotated form; this is a body that returns one
            # without declaring it: an authoring bug, so a crash, as the SDK has it.
            raise RuntimeError(
                f"{self.plan.name} returned an InputRequiredResult but its parameters use "
                f"resolvers; {_TWO_FLOWS}"
            )
        return result


def _as_mcp_error(exc: InvalidSignature, fn: Callable[..., Any]) -> McpInvalidSignature:
    """*exc* as an error the SDK's ``except InvalidSignature`` catches too.

    For a tool written against the SDK's markers, the SDK's own verdict on *fn* heads the
    message (so code and tests matching the SDK's wording keep working) and resolvent's
    path and fix follow it.
    """
    message = str(exc)
    headline = _sdk_verdict(fn) if _uses_sdk_markers(fn) else None
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


def _uses_sdk_markers(fn: Callable[..., Any]) -> bool:
    """True when a parameter of *fn* carries the SDK's own ``Resolve`` marker (anywhere)."""
    return any(_has_sdk_marker(hint) for hint in _hints(fn).values())


def _has_sdk_marker(hint: Any) -> bool:
    if typing.get_origin(hint) is typing.Annotated:
        if any(isinstance(meta, SdkResolve) for meta in hint.__metadata__):
            return True
        hint = hint.__origin__
    return any(_has_sdk_marker(arg) for arg in typing.get_args(hint))


def _sdk_answer_text(exc: InvalidAnswer, resolver: str, modern: bool) -> str:
    """A bad answer worded as the SDK's resolvers word it, naming the resolver's key."""
    detail = exc.detail
    if modern and detail.startswith("received "):
        return f"Resolver {resolver!r} {detail}"
    if not modern and detail in (NO_CONTENT, SCHEMA_MISMATCH):
        # The SDK's standalone request reports the SDK's own ValueError text here.
        detail = detail[0].upper() + detail[1:]
    return f"Resolver {resolver!r}: {detail}"


def _refusal(ctx: Context[Any, Any] | None, text: str) -> Exception:
    """The error whose *text* the SDK shows the client for this kind of request."""
    if ctx is None:  # called outside a request (MCPServer.call_tool() directly)
        return ToolError(text)
    method = ctx.request_context.method
    if method == "prompts/get":  # the SDK hides every prompt failure but MCPError
        return MCPError(code=types.INVALID_PARAMS, message=text)
    if method == "resources/read":
        return ResourceError(text)
    return ToolError(text)


def _state_refusal(ctx: Context[Any, Any] | None, plan: Plan, exc: StateError) -> Exception:
    """A state handle not found (or a conflict) as an error the client reads; one log line."""
    import logging

    logging.getLogger("resolvent").info("resolvent: %s: %s", plan.name, str(exc).split("\n")[0])
    return _refusal(ctx, str(exc))


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """*fn*'s annotations, each read on its own (a name imported only under
    TYPE_CHECKING does not stop the others); the core says what it needs of them."""
    return lenient_hints(fn)[0]


def _context_name(plan: Plan) -> str:
    """The tool's own Context parameter, or a free name for the one the wrapper adds."""
    for item in plan.inputs:
        if item.source == "value" and item.value_type is Context:
            return item.name
    taken = set(plan.arguments) | {item.name for item in plan.inputs}
    for name in _CONTEXT_NAMES:
        if name not in taken:
            return name
    raise McpInvalidSignature(f"{plan.name}: no free parameter name for the MCP Context")


async def _ask_over_back_channel(ctx: Context[Any, Any], step: Step, question: Any) -> Outcome:
    """Ask *question* with a standalone server-to-client request (<= 2025-11-25)."""
    session = ctx.session
    if session.can_send_request:
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


def _input_required(ctx: Context[Any, Any], pending: InputRequired) -> types.InputRequiredResult:
    """Batch this round's questions into one ``InputRequiredResult`` (2026-07-28+)."""
    requests: dict[str, types.InputRequest] = {}
    for key, question in pending.questions.items():
        require_capability(ctx, question, key)
        requests[key] = render(question)
    return types.InputRequiredResult(input_requests=requests, request_state=pending.state)
