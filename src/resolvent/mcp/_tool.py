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

It owns the wrapper and its per-call path; it never words an error (`_errors`) or carries a
question to the client itself (`_asking`).
"""

# The adapter is part of resolvent: its hot path starts a compiled plan directly, as
# Container.run does, which needs the container's private APP scope.
# pyright: reportPrivateUsage=false

from __future__ import annotations

import contextlib
import functools
import inspect
import typing
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

import mcp_types as types
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resolve import returns_input_required

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
    INJECTED,
    AnswerTimeout,
    CallTimeout,
    Launcher,
    argument_parameters,
    instance_parameter,
    shown_hints,
)
from .._state.idempotency import IDEMPOTENCY_META, idempotency_argument
from ._asking import ask_over_back_channel, input_required, uses_input_required
from ._errors import (
    TWO_FLOWS,
    McpInvalidSignature,
    as_mcp_error,
    refusal,
    sdk_answer_text,
    state_refusal,
    uses_sdk_markers,
)
from ._sessions import SessionTable, close_entries, connection_of, table_for

__all__ = ("inject",)

F = TypeVar("F", bound=Callable[..., Any])

_CONTEXT_NAMES = ("ctx", "context", "mcp_context", "resolvent_context")
_NO_VALUES: dict[Any, Any] = {}
# Classes of tool results that are not `InputRequiredResult` (a pydantic model, whose
# isinstance test runs the ABC machinery): the hot path tells them by a set lookup.
_PLAIN_RESULTS: set[type] = set()  # read only: a plan that takes no Context reads no values


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
    table = table_for(container, max_sessions, session_idle_timeout)

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
            raise as_mcp_error(exc, fn) from exc.__cause__
        if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
            raise McpInvalidSignature(
                f"{getattr(fn, '__name__', plan.name)!r} ({plan.name}) is a generator "
                "function: a tool, prompt or resource answers with what it returns, and "
                "calling a generator only makes one, so the code around its `yield` would "
                "never run.\n"
                "  fix: return the result; to set up and tear down around a call, do it in "
                "a resolver the handler takes, `Annotated[T, Resolve(fn)]`"
            )
        if plan.steps and returns_input_required(fn):
            raise McpInvalidSignature(
                f"Tool {getattr(fn, '__name__', plan.name)!r} ({plan.name}) combines "
                f"Resolve(...) parameters with an InputRequiredResult return; {TWO_FLOWS}."
                "\n  fix: ask through resolvers (Elicit, Sample, ListRoots), or return "
                "InputRequiredResult yourself from a tool without resolvers"
            )
        self.plan = plan
        # Written for the SDK's resolvers: the client sees the SDK's words for its errors.
        self.sdk_wording = uses_sdk_markers(fn)
        self._flags(plan)
        self.ctx_name = _context_name(plan)
        self.ctx_declared = self.ctx_name in {i.name for i in plan.inputs}
        # A handler that needs nothing from the request takes no Context: the SDK refuses
        # one on a static resource, which is called with no arguments at all.
        self.takes_ctx = Context in plan.value_types or self.asks or self.uses_session
        # How its plan starts with no scope object is the launcher's. A tool that needs
        # no framework value, asks nothing and has no SESSION values starts as
        # `Container.run` starts a plan (``start(kwargs)``: `bare`); its wrapper is made
        # for that, once.
        bare = Launcher(container, plan, values=False, asker=True)
        self.launcher = bare if bare.direct(plan) else Launcher(container, plan, asker=True)
        self.bare = self.launcher is bare
        self.wrapper = self._make_wrapper(plan)

    def _flags(self, plan: Plan) -> None:
        self.plan = plan
        self.asks = any(step.may_ask for step in plan.steps)
        self.uses_session = Scope.SESSION in plan.scopes

    def _make_wrapper(self, plan: Plan) -> Callable[..., Awaitable[Any]]:
        fn = self.fn
        hints = shown_hints(fn, plan.arguments)
        # A method decorated in its class body: Python binds its instance, which the
        # client never sees (`server.tool()(api.handler)`).
        instance = instance_parameter(fn, plan.arguments)
        params = argument_parameters(fn, [a for a in plan.arguments if a != instance], hints)
        # A `State.idempotent` tool's key may come in the request's _meta instead of its
        # argument: it takes the Context for that even when its plan does not.
        keyed = idempotency_argument(fn)
        if self.takes_ctx or keyed is not None:
            ctx_annotation = hints.get(self.ctx_name, Context) if self.ctx_declared else Context
            params.append(
                inspect.Parameter(
                    self.ctx_name, inspect.Parameter.KEYWORD_ONLY, annotation=ctx_annotation
                )
            )
        returns = hints.get("return", inspect.Signature.empty)
        run = self.run
        # The container's table of checked starts (see `Launcher`): `run` enters this
        # tool's once a call took that path, and the container empties it whenever the
        # answer may change.
        launcher = self.launcher
        ready, blocks, overrides = launcher.ready, launcher.blocks, launcher.override_var
        scopes = launcher.scopes
        tool, takes_ctx, ctx_name, body = self, self.takes_ctx, self.ctx_name, fn
        own_flow = types.InputRequiredResult

        plain = _PLAIN_RESULTS

        async def bare(**kwargs: Any) -> Any:
            if keyed is not None:
                take_meta_key(kwargs, keyed, ctx_name, takes_ctx)
            start = ready.get(launcher)
            if start is None or (blocks and overrides.get() is not None):
                return await run(kwargs)
            # The hot path of a tool that takes nothing from the request (see `bare`).
            try:
                result = await start(kwargs)
            except StateError as exc:
                raise state_refusal(None, tool.plan, exc) from None
            try:
                if result.__class__ in plain:  # not InputRequiredResult: told by its class
                    return result
            except TypeError:  # a class whose metaclass is unhashable
                pass
            if isinstance(result, own_flow):
                return tool._own_result(result)
            _remember_plain(result.__class__)
            return result

        async def wrapper(**kwargs: Any) -> Any:
            if keyed is not None:
                take_meta_key(kwargs, keyed, ctx_name, takes_ctx)
            start = ready.get(launcher)
            if start is None or (blocks and overrides.get() is not None):
                return await run(kwargs)
            # The hot path, in this one frame: no questions, no SESSION values, no scope
            # object; what `run` checked holds until the table is emptied.
            ctx = kwargs.pop(ctx_name, None) if takes_ctx else None
            try:
                values = {Context: ctx} if takes_ctx else _NO_VALUES
                result = await start(kwargs, values, scopes(), body)
            except StateError as exc:
                raise state_refusal(ctx, tool.plan, exc) from None
            try:
                if result.__class__ in plain:  # not InputRequiredResult: told by its class
                    return result
            except TypeError:  # a class whose metaclass is unhashable
                pass
            if isinstance(result, own_flow):
                return tool._own_result(result)
            _remember_plain(result.__class__)
            return result

        chosen: Callable[..., Awaitable[Any]] = bare if self.bare else wrapper
        if instance is not None:
            unbound = chosen

            async def method(bound_to: Any, /, **kwargs: Any) -> Any:
                kwargs[instance] = bound_to
                return await unbound(**kwargs)

            chosen = method
            params.insert(0, inspect.Parameter(instance, inspect.Parameter.POSITIONAL_OR_KEYWORD))
        annotations: dict[str, Any] = {
            p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty
        }
        if returns is not inspect.Signature.empty:
            annotations["return"] = returns
        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            value = getattr(fn, attribute, None)
            if value is not None:
                setattr(chosen, attribute, value)
        chosen.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
        chosen.__annotations__ = annotations
        chosen.__wrapped__ = fn  # type: ignore[attr-defined]
        setattr(chosen, INJECTED, True)
        return chosen

    async def run(self, kwargs: dict[str, Any]) -> Any:
        """One ``tools/call``, ``prompts/get`` or ``resources/read`` (one round of it)."""
        ctx: Context[Any, Any] | None = kwargs.pop(self.ctx_name, None)
        container = self.container
        launcher = self.launcher
        try:
            # With no scope object, if the plan starts so (see `Launcher.prepare`).
            started, result = await launcher.launch(kwargs, {Context: ctx})
        except StateError as exc:
            raise state_refusal(ctx, launcher.plan, exc) from None
        finally:
            plan = launcher.plan  # recompiled only for an override or a new provider
            if plan is not self.plan:
                self._flags(plan)
        if started:
            return self._own_result(result)
        if ctx is None:  # needs nothing from the request: no questions, no SESSION
            call = container.call()
            try:
                return await self._run_call(call, ctx, plan, kwargs, False)
            except CallTimeout as exc:
                raise refusal(ctx, exc.brief) from None
            except StateError as exc:
                raise state_refusal(ctx, plan, exc) from None
        modern = uses_input_required(ctx.protocol_version)
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
                raise refusal(ctx, text) from None
            raise refusal(ctx, str(exc)) from None
        except InvalidAnswer as exc:
            if self.sdk_wording and exc.resolver is not None:
                raise refusal(ctx, sdk_answer_text(exc, exc.resolver, modern)) from None
            raise refusal(ctx, str(exc)) from None
        except (CallTimeout, AnswerTimeout) as exc:
            # Expected, not a crash: the client reads what ran out of time and the bound,
            # the server logs one line (a traceback per timed-out call costs real CPU).
            raise refusal(ctx, exc.brief) from None
        except StateError as exc:
            raise state_refusal(ctx, plan, exc) from None

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
            call.answerer = functools.partial(ask_over_back_channel, ctx)
        async with call:
            try:
                # A sync handler runs in a worker thread (unless marked `inline`), as
                # the SDK runs a sync tool: the core does it, the same in every mode.
                return self._own_result(await call.run(plan, **kwargs))
            except InputRequired as pending:
                # Not a failure: this round ends cleanly and its resources close normally.
                assert ctx is not None  # a plan that asks always takes the Context
                return input_required(ctx, pending)

    def _own_result(self, result: Any) -> Any:
        """*result* of the tool body, refused when it takes over the resolvers' rounds."""
        if isinstance(result, types.InputRequiredResult) and self.plan.steps:
            # Registration refuses the annotated form; this is a body that returns one
            # without declaring it: an authoring bug, so a crash, as the SDK has it.
            raise RuntimeError(
                f"{self.plan.name} returned an InputRequiredResult but its parameters use "
                f"resolvers; {TWO_FLOWS}"
            )
        return result


def _remember_plain(cls: type) -> None:
    """Note *cls* as a result class that is not `InputRequiredResult` (a bounded set)."""
    if len(_PLAIN_RESULTS) < 256:
        with contextlib.suppress(TypeError):  # an unhashable class is tested every time
            _PLAIN_RESULTS.add(cls)


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


# -- the idempotency key of a State.idempotent tool, from the request's _meta too ----------
#
# A tool made with `resolvent.State.idempotent` takes the key as its ``idempotency_key``
# argument; an MCP client may send it instead under ``_meta`` as
# ``io.resolvent/idempotency-key`` (the argument wins when both are sent), so a client
# library can make every retried call idempotent without touching the arguments.


def take_meta_key(kwargs: dict[str, Any], argument: str, ctx_name: str, ctx_kept: bool) -> None:
    """Fill *argument* in an injected tool's *kwargs* from the request's ``_meta`` when
    the client did not send it; the SDK's `Context` is in them as *ctx_name*, and stays
    only when *ctx_kept* (the tool's plan takes it too)."""
    ctx = kwargs.get(ctx_name) if ctx_kept else kwargs.pop(ctx_name, None)
    if ctx is not None and kwargs.get(argument) is None:
        found = meta_key(ctx)
        if found is not None:
            kwargs[argument] = found


def meta_key(ctx: Context[Any, Any]) -> Any:
    """What the request's ``_meta`` carries under ``io.resolvent/idempotency-key``
    (checked by the handler like the argument), or None."""
    if ctx.protocol_version is None:  # no request: MCPServer.call_tool() called directly
        return None
    meta = ctx.request_context.meta
    if not meta:
        return None
    return meta.get(IDEMPOTENCY_META)
