"""The implementations measured side by side, each built from a `Graph`.

Every builder returns an `Instance` (``once()`` runs one call in a fresh call scope and
returns the handler's result) or a string saying why the library cannot express the
scenario. Builders may raise (for example `RecursionError` on long chains); the runner
reports that as a failure instead of crashing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
import anyio.to_thread

from .graphs import USER_ID, Graph, levels, node_source

_serial = itertools.count()


@dataclass
class Instance:
    once: Callable[[], Awaitable[Any]]
    counts: list[int]
    teardowns: list[int]
    info: dict[str, Any] = field(default_factory=dict)


Builder = Callable[[Graph, contextlib.AsyncExitStack], Awaitable["Instance | str"]]


def _exec(source: str, namespace: dict[str, Any], label: str) -> dict[str, Any]:
    # dont_inherit: the graphs get evaluated annotations, as ordinary modules do, rather
    # than the string annotations this module's `from __future__` import would impose.
    code = compile(source, f"<benchmark {label} #{next(_serial)}>", "exec", dont_inherit=True)
    exec(code, namespace)
    return namespace


def _namespace(graph: Graph, **extra: Any) -> dict[str, Any]:
    n = len(graph.nodes)
    return {
        "counts": [0] * n,
        "teardowns": [0] * n,
        "sleep": asyncio.sleep,
        "Annotated": Annotated,
        "AsyncIterator": AsyncIterator,
        **extra,
    }


def _instance(ns: dict[str, Any], once: Callable[[], Awaitable[Any]], **info: Any) -> Instance:
    return Instance(once, ns["counts"], ns["teardowns"], info)


def _app_once(fn: Any) -> Any:
    """An APP singleton written by hand: created on first use, then shared."""
    made: list[Any] = []

    async def once() -> Any:
        if not made:
            made.append(await fn())
        return made[0]

    return once


# --- hand-written: every resolver awaited once, in dependency order -------------------


def _call(i: int, graph: Graph) -> str:
    node = graph.nodes[i]
    # By position, in the parameters' order (`node_source`: dependencies, then user_id):
    # the fastest call CPython has, so the floor is the lowest straight-line code reaches.
    args = [f"v{j}" for j in node.deps] + (["user_id"] if node.arg else [])
    return f"n{i}({', '.join(args)})"


async def handwritten(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    """The floor: straight-line code a person would write for this graph."""
    ns = _namespace(graph, APP={}, MISSING=object(), gather=asyncio.gather)
    ns["to_thread"] = anyio.to_thread.run_sync
    src = [node_source(i, n, lambda j: f"d{j}", "user_id", "") for i, n in enumerate(graph.nodes)]
    src.append("async def handler(user_id, r):\n    return r\n")
    body: list[str] = []
    indent = "    "
    finals: list[str] = []
    order: list[list[int]] = (
        levels(graph) if graph.concurrent else [[i] for i in range(len(graph.nodes))]
    )
    blocks: list[str] = []
    pending_sync: list[int] = []

    def flush_sync() -> None:
        if not pending_sync:
            return
        name = f"block{len(blocks)}"
        inner = [f"def {name}(user_id, {', '.join(f'v{j}' for j in needed_by(pending_sync))}):"]
        inner += [f"    v{i} = {_call(i, graph)}" for i in pending_sync]
        outs = ", ".join(f"v{i}" for i in pending_sync)
        inner.append(f"    return ({outs},)")
        blocks.append("\n".join(inner) + "\n")
        params = ", ".join(["user_id", *(f"v{j}" for j in needed_by(pending_sync))])
        body.append(f"{indent}({outs},) = await to_thread({name}, {params})")
        pending_sync.clear()

    def needed_by(group: list[int]) -> list[int]:
        inside = set(group)
        return sorted({j for i in group for j in graph.nodes[i].deps if j not in inside})

    for group in order:
        if len(group) > 1:
            calls = ", ".join(_call(i, graph) for i in group)
            outs = ", ".join(f"v{i}" for i in group)
            body.append(f"{indent}{outs} = await gather({calls})")
            continue
        i = group[0]
        node = graph.nodes[i]
        if node.kind == "sync" and graph.threaded and not node.app:
            pending_sync.append(i)
            continue
        flush_sync()
        if node.app:
            body.append(f"{indent}v{i} = APP.get({i}, MISSING)")
            body.append(f"{indent}if v{i} is MISSING: v{i} = APP[{i}] = await {_call(i, graph)}")
        elif node.kind == "agen":
            body.append(f"{indent}g{i} = {_call(i, graph)}")
            body.append(f"{indent}v{i} = await g{i}.__anext__()")
            body.append(f"{indent}try:")
            finals.append(indent)
            indent += "    "
        elif node.kind == "sync":
            body.append(f"{indent}v{i} = {_call(i, graph)}")
        else:
            body.append(f"{indent}v{i} = await {_call(i, graph)}")
    flush_sync()
    body.append(f"{indent}return await handler(user_id, v{graph.root})")
    for i in reversed([k for k, n in enumerate(graph.nodes) if n.kind == "agen"]):
        outer = finals.pop()
        body.append(f"{outer}finally:")
        body.append(f"{outer}    try:\n{outer}        await g{i}.__anext__()")
        body.append(f"{outer}    except StopAsyncIteration:\n{outer}        pass")
    src += blocks
    src.append("async def once():\n    user_id = USER_ID\n" + "\n".join(body) + "\n")
    ns["USER_ID"] = USER_ID
    _exec("\n".join(src), ns, "hand-written")
    return _instance(ns, ns["once"])


# --- resolvent ---------------------------------------------------------------------------


def resolvent_setup(graph: Graph) -> tuple[Any, Any, dict[str, Any]]:
    """A resolvent container with the graph's providers registered, and the handler."""
    from resolvent import Container, Resolve, Scope

    ns = _namespace(graph, Resolve=Resolve)
    src = [
        node_source(
            i, n, lambda j: f"d{j}: Annotated[int, Resolve(n{j})]", "user_id: str", " -> int"
        )
        for i, n in enumerate(graph.nodes)
    ]
    src.append(
        f"async def handler(user_id: str, r: Annotated[int, Resolve(n{graph.root})]) -> int:\n"
        "    return r\n"
    )
    _exec("\n".join(src), ns, "resolvent")
    container = Container(concurrent=graph.concurrent)
    for i, node in enumerate(graph.nodes):
        fn = ns[f"n{i}"]
        if node.app:
            container.provide(fn, scope=Scope.APP, inline=node.kind == "sync")
        elif node.kind == "sync" and not graph.threaded:
            container.provide(fn, inline=True)
    return container, ns["handler"], ns


async def resolvent(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    container, handler, ns = resolvent_setup(graph)
    plan = container.compile(handler)
    await stack.enter_async_context(container)
    run = container.run

    def once() -> Awaitable[Any]:
        return run(handler, user_id=USER_ID)

    return _instance(ns, once, plan=plan, container=container)


# --- the MCP SDK's built-in resolvers -----------------------------------------------------


async def sdk(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    if graph.has_app:
        return "no APP scope"
    if "agen" in graph.kinds:
        return "no resources (generators)"
    if "sync" in graph.kinds and not graph.threaded:
        return "sync resolvers always run in a worker thread"
    if graph.concurrent:
        return "resolves sequentially only"
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.resolve import (
        Resolve,
        build_resolver_plans,
        find_resolved_parameters,
        resolve_arguments,
    )

    ns = _namespace(graph, Resolve=Resolve)
    src = [
        node_source(
            i, n, lambda j: f"d{j}: Annotated[int, Resolve(n{j})]", "user_id: str", " -> int"
        )
        for i, n in enumerate(graph.nodes)
    ]
    src.append(
        f"async def handler(user_id: str, r: Annotated[int, Resolve(n{graph.root})]) -> int:\n"
        "    return r\n"
    )
    _exec("\n".join(src), ns, "sdk")
    handler = ns["handler"]
    resolved = find_resolved_parameters(handler)
    plans = build_resolver_plans(resolved, {"user_id"})
    # The Context `MCPServer.call_tool` builds when called directly, made once: it is
    # the framework's per-request object, not part of dependency resolution.
    ctx = Context(mcp_server=MCPServer("bench"))
    args = {"user_id": USER_ID}

    async def once() -> Any:
        injected = await resolve_arguments(resolved, plans, args, ctx)
        assert isinstance(injected, dict)
        return await handler(**args, **injected)

    return _instance(ns, once)


# --- dishka ------------------------------------------------------------------------------


def _typed_namespace(graph: Graph, **extra: Any) -> dict[str, Any]:
    ns = _namespace(graph, **extra)
    for i in range(len(graph.nodes)):
        ns[f"T{i}"] = type(f"T{i}", (), {})
    ns["UserId"] = type("UserId", (str,), {})
    return ns


def _typed_sources(graph: Graph) -> list[str]:
    out = []
    for i, n in enumerate(graph.nodes):
        ret = f" -> AsyncIterator[T{i}]" if n.kind == "agen" else f" -> T{i}"
        out.append(node_source(i, n, lambda j: f"d{j}: T{j}", "user_id: UserId", ret))
    return out


async def dishka(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    if "sync" in graph.kinds and graph.threaded:
        return "runs sync factories inline only"
    if graph.concurrent:
        return "resolves sequentially only"
    from dishka import Provider, Scope, make_async_container

    ns = _typed_namespace(graph)
    _exec("\n".join(_typed_sources(graph)), ns, "dishka")
    provider = Provider(scope=Scope.REQUEST)
    for i, node in enumerate(graph.nodes):
        provider.provide(
            ns[f"n{i}"], provides=ns[f"T{i}"], scope=Scope.APP if node.app else Scope.REQUEST
        )
    user_type = ns["UserId"]
    if _reads_arg(graph):
        provider.from_context(provides=user_type, scope=Scope.REQUEST)
    container = make_async_container(provider)
    stack.push_async_callback(container.close)
    root = ns[f"T{graph.root}"]
    user_id = user_type(USER_ID)
    context = {user_type: user_id} if _reads_arg(graph) else None

    async def handler(user_id: str, r: Any) -> Any:
        return r

    async def once() -> Any:
        async with container(context=context) as request:
            r = await request.get(root)
            return await handler(user_id=user_id, r=r)

    return _instance(ns, once)


# --- wireup ------------------------------------------------------------------------------


async def wireup(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    if "sync" in graph.kinds and graph.threaded:
        return "runs sync factories inline only"
    if graph.concurrent:
        return "resolves sequentially only"
    import wireup as wu

    ns = _typed_namespace(graph)
    src = _typed_sources(graph)
    src.append("def user_placeholder() -> UserId:\n    raise RuntimeError('supplied per scope')\n")
    _exec("\n".join(src), ns, "wireup")
    injectables = [
        wu.injectable(ns[f"n{i}"], lifetime="singleton" if node.app else "scoped")
        for i, node in enumerate(graph.nodes)
    ]
    if _reads_arg(graph):
        injectables.append(wu.injectable(ns["user_placeholder"], lifetime="scoped"))
    container = wu.create_async_container(injectables=injectables)
    stack.push_async_callback(container.close)
    root = ns[f"T{graph.root}"]
    user_type = ns["UserId"]
    user_id = user_type(USER_ID)
    provided = {user_type: user_id} if _reads_arg(graph) else None

    async def handler(user_id: str, r: Any) -> Any:
        return r

    async def once() -> Any:
        async with container.enter_scope(provided) as scope:
            r = await scope.get(root)
            return await handler(user_id=user_id, r=r)

    return _instance(ns, once)


# --- fast-depends --------------------------------------------------------------------------


async def fast_depends(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    if graph.has_app:
        return "no APP scope"
    if "sync" in graph.kinds and not graph.threaded:
        return "sync dependencies always run in a worker thread"
    if graph.concurrent:
        return "resolves sequentially only"
    from fast_depends import Depends, inject

    ns = _namespace(graph, Depends=Depends)
    src = [
        node_source(i, n, lambda j: f"d{j}=Depends(n{j})", "user_id", "", arg_first=True)
        for i, n in enumerate(graph.nodes)
    ]
    src.append(f"async def handler(user_id, r=Depends(n{graph.root})):\n    return r\n")
    _exec("\n".join(src), ns, "fast-depends")
    # cast=False: dependency injection only, no pydantic validation of arguments.
    handler = inject(ns["handler"], cast=False)

    def once() -> Awaitable[Any]:
        return handler(user_id=USER_ID)  # type: ignore[no-any-return]

    return _instance(ns, once)


# --- diwire --------------------------------------------------------------------------------


def _reads_arg(graph: Graph) -> bool:
    """Whether some resolver takes the call argument. Where none does, a peer gets no
    node, context value or ContextVar for it: its authors would not add one."""
    return any(n.arg for n in graph.nodes)


def _shared_within_call(graph: Graph) -> bool:
    """Whether some per-call resolver feeds more than one other resolver."""
    uses = [0] * len(graph.nodes)
    for node in graph.nodes:
        for j in node.deps:
            uses[j] += 1
    return any(u > 1 and not graph.nodes[j].app for j, u in enumerate(uses))


async def diwire(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    if "sync" in graph.kinds and graph.threaded:
        return "runs sync factories inline only"
    if graph.concurrent:
        return "resolves sequentially only"
    import contextvars

    from diwire import (
        Container,
        DependencyRegistrationPolicy,
        Lifetime,
        LockMode,
        MissingPolicy,
        Scope,
    )

    ns = _typed_namespace(graph)
    # diwire 1.5 has no per-scope context values: the call argument reaches the graph
    # through a ContextVar set around each call, read by a REQUEST-scoped factory.
    current = contextvars.ContextVar[str]("user_id")
    ns["current_user"] = current
    src = _typed_sources(graph)
    src.append("def user_id_factory() -> UserId:\n    return current_user.get()\n")
    _exec("\n".join(src), ns, "diwire")
    # As diwire's own benchmarks build it: no locks (one event loop, no threads), strict
    # registration, and no resolver context (nothing here resolves through it).
    container = Container(
        lock_mode=LockMode.NONE,
        missing_policy=MissingPolicy.ERROR,
        dependency_registration_policy=DependencyRegistrationPolicy.IGNORE,
        use_resolver_context=False,
    )
    for i, node in enumerate(graph.nodes):
        fn = ns[f"n{i}"]
        scope = Scope.APP if node.app else Scope.REQUEST
        if node.kind == "agen":
            # The benchmark's resource body has no try/finally (the same body for all).
            container.add_generator(
                fn,
                provides=ns[f"T{i}"],
                scope=scope,
                lifetime=Lifetime.SCOPED,
                require_generator_finally=False,
            )
        else:
            container.add_factory(fn, provides=ns[f"T{i}"], scope=scope, lifetime=Lifetime.SCOPED)
    reads = _reads_arg(graph)
    if reads:
        container.add_factory(
            ns["user_id_factory"],
            provides=ns["UserId"],
            scope=Scope.REQUEST,
            lifetime=Lifetime.SCOPED,
        )
    resolver = container.compile()
    stack.push_async_callback(resolver.aclose)
    root = ns[f"T{graph.root}"]
    user_id = ns["UserId"](USER_ID)
    enter = resolver.enter_scope

    async def handler(user_id: str, r: Any) -> Any:
        return r

    async def once() -> Any:
        token = current.set(user_id)
        try:
            async with enter(Scope.REQUEST) as request:
                r = await request.aresolve(root)
                return await handler(user_id=user_id, r=r)
        finally:
            current.reset(token)

    async def once_without_arg() -> Any:  # no ContextVar where the graph does not read it
        async with enter(Scope.REQUEST) as request:
            r = await request.aresolve(root)
            return await handler(user_id=user_id, r=r)

    return _instance(ns, once if reads else once_without_arg)


# --- that-depends --------------------------------------------------------------------------


async def that_depends(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    if "sync" in graph.kinds and graph.threaded:
        return "runs sync factories inline only"
    if graph.concurrent:
        return "resolves sequentially only"
    if _shared_within_call(graph):
        return "factories are not cached within a call (a shared dependency runs once per use)"
    from that_depends import ContextScopes, container_context, fetch_context_item, providers

    ns = _namespace(graph)
    src = [node_source(i, n, lambda j: f"d{j}", "user_id", "") for i, n in enumerate(graph.nodes)]
    _exec("\n".join(src), ns, "that-depends")
    user = providers.Factory(fetch_context_item, "user_id")
    made: list[Any] = []
    for i, node in enumerate(graph.nodes):
        fn = ns[f"n{i}"]
        kwargs: dict[str, Any] = {f"d{j}": made[j] for j in node.deps}
        if node.arg:
            kwargs["user_id"] = user
        if node.app:
            made.append(providers.AsyncSingleton(fn, **kwargs))
            stack.push_async_callback(made[-1].tear_down)
        elif node.kind == "agen":
            made.append(
                providers.ContextResource(fn, **kwargs).with_config(scope=ContextScopes.REQUEST)
            )
        elif node.kind == "sync":
            made.append(providers.Factory(fn, **kwargs))
        else:
            made.append(providers.AsyncFactory(fn, **kwargs))
    root = made[graph.root]
    resources = [p for p, n in zip(made, graph.nodes, strict=True) if n.kind == "agen"]
    context = {"user_id": USER_ID} if _reads_arg(graph) else None

    async def handler(user_id: str, r: Any) -> Any:
        return r

    async def once() -> Any:
        async with container_context(
            *resources, global_context=context, scope=ContextScopes.REQUEST
        ):
            r = await root.resolve()
            return await handler(user_id=USER_ID, r=r)

    return _instance(ns, once)


# --- svcs ----------------------------------------------------------------------------------


async def svcs_(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    if graph.has_app:
        return "no APP scope (registry values are built up front, not on first use)"
    if "sync" in graph.kinds and graph.threaded:
        return "runs sync factories inline only"
    if graph.concurrent:
        return "resolves sequentially only"
    import svcs

    ns = _typed_namespace(graph)
    _exec("\n".join(_typed_sources(graph)), ns, "svcs")
    registry = svcs.Registry()
    stack.push_async_callback(registry.aclose)
    for i, node in enumerate(graph.nodes):
        fn = ns[f"n{i}"]
        if node.kind == "agen":
            fn = contextlib.asynccontextmanager(fn)
        registry.register_factory(ns[f"T{i}"], svcs.aautowire(fn))
    root = ns[f"T{graph.root}"]
    user_type = ns["UserId"]
    user_id = user_type(USER_ID)
    container_type = svcs.Container

    async def handler(user_id: str, r: Any) -> Any:
        return r

    async def once() -> Any:
        async with container_type(registry) as container:
            container.register_local_value(user_type, user_id)
            r = await container.aget(root)
            return await handler(user_id=user_id, r=r)

    async def once_without_arg() -> Any:
        async with container_type(registry) as container:
            r = await container.aget(root)
            return await handler(user_id=user_id, r=r)

    return _instance(ns, once if _reads_arg(graph) else once_without_arg)


# --- modern-di -----------------------------------------------------------------------------


async def modern_di(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    if graph.kinds != {"sync"}:
        return "sync creators only (an async creator raises AsyncCreatorError)"
    if graph.threaded:
        return "runs sync creators inline only"
    from modern_di import Container, Scope, providers

    ns = _typed_namespace(graph)
    _exec("\n".join(_typed_sources(graph)), ns, "modern-di")
    user_type = ns["UserId"]
    found: list[Any] = (
        [providers.ContextProvider(scope=Scope.REQUEST, context_type=user_type)]
        if _reads_arg(graph)
        else []
    )
    for i, node in enumerate(graph.nodes):
        scope = Scope.APP if node.app else Scope.REQUEST
        found.append(providers.Factory(scope=scope, creator=ns[f"n{i}"], cache=True))
    container = Container(scope=Scope.APP)
    container.add_providers(*found)
    stack.callback(container.close_sync)
    root = ns[f"T{graph.root}"]
    user_id = user_type(USER_ID)
    context = {user_type: user_id} if _reads_arg(graph) else None
    child = container.build_child_container

    async def handler(user_id: str, r: Any) -> Any:
        return r

    async def once() -> Any:
        with child(scope=Scope.REQUEST, context=context) as request:
            r = request.resolve(root)
            return await handler(user_id=user_id, r=r)

    return _instance(ns, once)


# --- FastMCP Depends (uncalled-for) ------------------------------------------------------------


async def fastmcp_depends(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    if graph.has_app:
        return "no APP scope"
    if "sync" in graph.kinds and graph.threaded:
        return "runs sync dependencies inline only"
    if graph.concurrent:
        return "resolves sequentially only"
    from fastmcp.dependencies import Depends
    from fastmcp.server.dependencies import without_injected_parameters
    from uncalled_for import CallArgument

    ns = _namespace(
        graph, Depends=Depends, CallArgument=CallArgument, acm=contextlib.asynccontextmanager
    )
    # A resource is an async context manager factory (FastMCP documents
    # @asynccontextmanager; a bare async generator would be injected as the generator).
    src = [
        ("@acm\n" if n.kind == "agen" else "")
        + node_source(i, n, lambda j: f"d{j}=Depends(n{j})", "user_id=CallArgument()", "")
        for i, n in enumerate(graph.nodes)
    ]
    src.append(f"async def handler(user_id: str, r=Depends(n{graph.root})):\n    return r\n")
    _exec("\n".join(src), ns, "fastmcp")
    # The wrapper FastMCP builds around a tool function: resolve, call, tear down.
    tool = without_injected_parameters(ns["handler"])

    def once() -> Awaitable[Any]:
        return tool(user_id=USER_ID)  # type: ignore[no-any-return]

    return _instance(ns, once)


IMPLEMENTATIONS: dict[str, Builder] = {
    "hand-written": handwritten,
    "resolvent": resolvent,
    "mcp-sdk": sdk,
    "dishka": dishka,
    "wireup": wireup,
    "fast-depends": fast_depends,
    "diwire": diwire,
    "that-depends": that_depends,
    "svcs": svcs_,
    "modern-di": modern_di,
    "fastmcp": fastmcp_depends,
}


async def one_sleep(seconds: float) -> Instance:
    """Reference for the I/O-bound scenario: a single bare sleep."""

    async def once() -> int:
        await asyncio.sleep(seconds)
        return 0

    return Instance(once, [], [])


async def bare_hop() -> Instance:
    """Reference: one bare ``anyio.to_thread.run_sync`` of a no-op."""

    def noop() -> int:
        return 0

    async def once() -> int:
        return await anyio.to_thread.run_sync(noop)

    return Instance(once, [], [])
