"""Context variables behave like plain Python, in every mode.

The rule (docs/concepts.md, "Context variables"): what a CALL resolver or resource sets is
seen by the resolvers after it and by the handler, as if you had called it yourself before
the handler; a resource's teardown runs in the context of its set-up, so
``token = var.set(x); yield; var.reset(token)`` works and the caller's variable is back
afterwards. APP and SESSION values start in a home task of their own: what their set-up
sets stays there.
"""

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Annotated, Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES as PROTOCOLS
from mcp_helpers import Name, answering, client, text
from resolvent import Container, Elicit, Resolve, Scope
from resolvent.mcp import inject

request_id: ContextVar[str] = ContextVar("request_id", default="-")
tenant: ContextVar[str] = ContextVar("tenant", default="-")


class Tag:
    """What a tagging resource yields."""


# -- how a handler is run: every mode a user reaches --------------------------------------

MODES = ("plan", "interpreter", "concurrent", "call_timeout", "resolve", "resolve_deadline")


def container_for(mode: str) -> Container:
    if mode == "concurrent":
        return Container(concurrent=True)
    if mode == "call_timeout":
        return Container(call_timeout=5)
    return Container()


async def run(container: Container, mode: str, handler: Callable[..., Awaitable[Any]]) -> Any:
    """Run *handler* the way *mode* says, inside an open container."""
    async with container:
        if mode == "interpreter":  # rounds=True always takes the interpreter
            async with container.call(rounds=True) as call:
                return await call.run(handler)
        if mode in ("resolve", "resolve_deadline"):
            # A framework resolving under a deadline of its own, then calling the handler.
            with anyio.fail_after(5 if mode == "resolve_deadline" else None):
                async with container.call() as call:
                    kwargs = await call.resolve(handler)
                    return await handler(**kwargs)
        return await container.run(handler)


parametrize_modes = pytest.mark.parametrize("mode", MODES)

# -- resources of every kind that set a variable around their yield -----------------------

KINDS = ("async_generator", "sync_generator_thread", "sync_generator_inline", "context_manager")


def register_tagging(container: Container, kind: str, scope: Scope = Scope.CALL) -> Any:
    """Register a resource of *kind* that sets request_id for its lifetime; return it."""
    if kind == "async_generator":

        async def tagged() -> AsyncIterator[Tag]:
            token = request_id.set("r-1")
            try:
                yield Tag()
            finally:
                request_id.reset(token)

        return container.provider(scope=scope)(tagged)
    if kind == "context_manager":

        @contextmanager
        def tagging() -> Iterator[Tag]:
            token = request_id.set("r-1")
            try:
                yield Tag()
            finally:
                request_id.reset(token)

        def tagged_cm() -> AbstractContextManager[Tag]:  # a plain def: a worker thread
            return tagging()

        return container.provider(scope=scope)(tagged_cm)

    def tagged_sync() -> Iterator[Tag]:
        token = request_id.set("r-1")
        try:
            yield Tag()
        finally:
            request_id.reset(token)  # fails if teardown runs in another context

    return container.provider(scope=scope, inline=kind.endswith("inline"))(tagged_sync)


@parametrize_modes
@pytest.mark.parametrize("kind", KINDS)
async def test_a_resource_sets_a_variable_for_the_handler_and_resets_it(
    mode: str, kind: str
) -> None:
    container = container_for(mode)
    tagged = register_tagging(container, kind)

    def label(tag: Annotated[Tag, Resolve(tagged)]) -> str:  # runs after it: sees it too
        return f"label {request_id.get()}"

    async def handler(
        tag: Annotated[Tag, Resolve(tagged)], labelled: Annotated[str, Resolve(label)]
    ) -> tuple[str, str]:
        return request_id.get(), labelled

    assert await run(container, mode, handler) == ("r-1", "label r-1")
    assert request_id.get() == "-"  # the teardown reset it, as a `with` block would


@parametrize_modes
async def test_plain_resolvers_set_variables_for_the_handler(mode: str) -> None:
    container = container_for(mode)

    async def choose_tenant() -> str:
        tenant.set("acme")
        return "acme"

    def stamp() -> str:  # a plain def: a worker thread
        request_id.set("r-2")
        return "r-2"

    async def handler(
        t: Annotated[str, Resolve(choose_tenant)], r: Annotated[str, Resolve(stamp)]
    ) -> tuple[str, str]:
        return tenant.get(), request_id.get()

    async def isolated() -> tuple[str, str]:  # not leaking into this test's context
        return await run(container, mode, handler)

    async with anyio.create_task_group() as group:
        results: list[tuple[str, str]] = []

        async def keep() -> None:
            results.append(await isolated())

        group.start_soon(keep)
    assert results == [("acme", "r-2")]


@parametrize_modes
async def test_the_caller_s_variables_reach_every_resolver(mode: str) -> None:
    container = container_for(mode)
    seen: list[str] = []

    async def read_async() -> AsyncIterator[str]:
        seen.append(tenant.get())
        yield "a"

    def read_sync() -> str:
        seen.append(tenant.get())
        return "s"

    async def handler(
        a: Annotated[str, Resolve(read_async)], s: Annotated[str, Resolve(read_sync)]
    ) -> str:
        return tenant.get()

    token = tenant.set("caller")
    try:
        assert await run(container, mode, handler) == "caller"
    finally:
        tenant.reset(token)
    assert seen == ["caller", "caller"]


@pytest.mark.parametrize("waits", ["request", "tenant"])
async def test_branches_resources_reset_their_variables_after_a_concurrent_call(
    waits: str,
) -> None:
    """Two branches each open a resource that sets a variable around its ``yield``; one
    (*waits*) opens after the other, whose branch has finished, and still has a step to go
    (in the caller's task or a branch task). The handler sees both variables, and after
    the call both are back to the caller's."""
    opened = {name: anyio.Event() for name in ("request", "tenant")}

    def tagging(name: str, var: ContextVar[str]) -> Callable[[], AsyncIterator[str]]:
        async def tag() -> AsyncIterator[str]:
            token = var.set(name)
            opened[name].set()
            if name == waits:  # the other opens first
                await opened["tenant" if name == "request" else "request"].wait()
            yield name
            var.reset(token)

        tag.__name__ = tag.__qualname__ = name
        return tag

    by_request, by_tenant = tagging("request", request_id), tagging("tenant", tenant)

    async def after_request(t: Annotated[str, Resolve(by_request)]) -> str:
        return f"{t} {request_id.get()} {tenant.get()}"

    async def after_tenant(t: Annotated[str, Resolve(by_tenant)]) -> str:
        return f"{t} {request_id.get()} {tenant.get()}"

    async def handler(
        x: Annotated[str, Resolve(after_request)], y: Annotated[str, Resolve(after_tenant)]
    ) -> str:
        return f"{request_id.get()} {tenant.get()}"

    container = Container(concurrent=True)
    with anyio.fail_after(5):  # only catches a hang
        assert await container.run(handler) == "request tenant"
    assert (request_id.get(), tenant.get()) == ("-", "-")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scope", [Scope.APP, Scope.SESSION])
async def test_shared_resources_reset_their_variable_in_their_own_context(
    kind: str, scope: Scope
) -> None:
    container = container_for("plan")
    tagged = register_tagging(container, kind, scope)

    async def handler(tag: Annotated[Tag, Resolve(tagged)]) -> str:
        return request_id.get()

    async with container, container.session() as session:
        # A shared value starts in a home task of its scope: its settings stay there.
        assert await session.run(handler) == "-"
        assert await session.run(handler) == "-"
    assert request_id.get() == "-"  # and the teardown ran without error


# -- MCP ----------------------------------------------------------------------------------


def tagging_server(options: dict[str, Any], kind: str, sync_tool: bool) -> MCPServer:
    container = Container(**options)
    tagged = register_tagging(container, kind)
    server = MCPServer("tags", lifespan=container.lifespan)

    if sync_tool:

        @server.tool()
        @inject(container)
        def whoami_sync(tag: Annotated[Tag, Resolve(tagged)]) -> str:
            return request_id.get()

    else:

        @server.tool()
        @inject(container)
        async def whoami(tag: Annotated[Tag, Resolve(tagged)]) -> str:
            return request_id.get()

    return server


@pytest.mark.parametrize(
    "options",
    [{}, {"concurrent": True}, {"call_timeout": 5}],
    ids=["plan", "concurrent", "timeout"],
)
@pytest.mark.parametrize("kind", ["async_generator", "sync_generator_thread"])
@pytest.mark.parametrize("sync_tool", [False, True], ids=["async_tool", "sync_tool"])
async def test_an_mcp_tool_sees_what_its_resource_set(
    options: dict[str, Any], kind: str, sync_tool: bool
) -> None:
    server = tagging_server(options, kind, sync_tool)
    name = "whoami_sync" if sync_tool else "whoami"
    async with client(server, "legacy") as c:
        result = await c.call_tool(name, {})
        assert not result.is_error, text(result)
        assert text(result) == "r-1"
        assert text(await c.call_tool(name, {})) == "r-1"


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", ["async_generator", "sync_generator_thread"])
async def test_a_tool_that_asks_sees_what_its_resource_set_in_every_round(
    protocol: str, kind: str
) -> None:
    # Legacy: the question goes over the back channel mid-call. 2026-07-28: each round is
    # a call of its own (the interpreter), and the resource is opened again in each.
    container = Container()
    tagged = register_tagging(container, kind)
    server = MCPServer("ask", lifespan=container.lifespan)

    async def ask_name(tag: Annotated[Tag, Resolve(tagged)]) -> Elicit[Name]:
        return Elicit(f"Your name ({request_id.get()})?", Name)

    @server.tool()
    @inject(container)
    async def greet(name: Annotated[Name, Resolve(ask_name)]) -> str:
        return f"{name.name} in {request_id.get()}"

    callback = answering("accept", {"name": "Ada"})
    async with client(server, protocol, elicitation_callback=callback) as c:
        result = await c.call_tool("greet", {})
    assert text(result) == "Ada in r-1"
    assert callback.asked == ["Your name (r-1)?"]


async def test_leaving_an_override_closes_a_shared_sync_resource_in_its_own_context() -> None:
    container = Container()

    @container.provider(scope=Scope.APP)
    def real_tag() -> Iterator[Tag]:
        yield Tag()

    def fake_tag() -> Iterator[Tag]:  # a test double that tags what it touches
        token = request_id.set("fake")
        try:
            yield Tag()
        finally:
            request_id.reset(token)

    async def handler(tag: Annotated[Tag, Resolve(real_tag)]) -> Tag:
        return tag

    async with container:
        with container.override(real_tag, fake_tag):  # plain `with`: closes it on leaving
            await container.run(handler)
    assert request_id.get() == "-"
