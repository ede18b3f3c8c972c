"""The FastAPI scenario: one route's dependencies, each integration's own way, in process.

    python -m benchmarks --only FastAPI

Every variant is a FastAPI app with one route, ``GET /graph?user_id=...``, whose
dependencies are the same graph: an APP singleton, a per-request async-generator resource
using it, and five async resolvers (one takes the ``user_id`` query parameter). A call is
one request through ``httpx.ASGITransport`` (no network, no server), so the ratios hold
FastAPI's own request handling, the same in every variant, plus each integration's cost:

- hand-written: the route awaits each resolver once and closes the resource itself;
- resolvent: ``resolvent.starlette.inject`` (the resource closes after the response);
- fastapi-depends: FastAPI's ``Depends`` (``yield`` for the resource, the baseline's
  APP cache, as ``Depends`` has no APP scope);
- dishka: ``dishka.integrations.fastapi`` (``setup_dishka``, ``@inject``, ``FromDishka``);
- wireup: ``wireup.integration.fastapi`` (``setup``, ``Injected``).

dishka and wireup read the query parameter from the request in a provider of their own,
the way their documentation shows a request value reaching a dependency.

One reference is timed beside them (in the JSON, not the table): the hand-written route with
one empty ``yield`` dependency added, FastAPI's own cost of holding anything open until the
response is sent that way (resolvent's FastAPI wrapper puts the exit of its CALL resources
on FastAPI's per-request exit stack instead, with no dependency to solve).
"""

import contextlib
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from .graphs import USER_ID, Graph, Node, node_source
from .impls import (
    Instance,
    _app_once,
    _exec,
    _instance,
    _namespace,
    _typed_namespace,
    _typed_sources,
)
from .runner import Scenario

TITLE = "FastAPI route: APP singleton, per-request resource, 5 resolvers (httpx.ASGITransport)"
URL = f"/graph?user_id={USER_ID}"


def graph() -> Graph:
    """An APP singleton, a per-request resource using it, and five async resolvers."""
    return Graph(
        (
            Node(app=True),
            Node((0,), kind="agen"),
            Node((0,), arg=True),
            Node((1,)),
            Node((1, 2)),
            Node((2, 3)),
            Node((4, 5, 1)),
        )
    )


def _hand(g: Graph) -> tuple[Any, dict[str, Any]]:
    from fastapi import FastAPI

    ns = _namespace(g, app_once=_app_once)
    src = [node_source(i, n, lambda j: f"d{j}", "user_id", "") for i, n in enumerate(g.nodes)]
    src.append(
        "n0 = app_once(n0)\n"
        "async def route(user_id: str) -> int:\n"
        "    v0 = await n0()\n"
        "    g1 = n1(v0)\n"
        "    v1 = await g1.__anext__()\n"
        "    try:\n"
        "        v2 = await n2(v0, user_id)\n"
        "        v3 = await n3(v1)\n"
        "        v4 = await n4(v1, v2)\n"
        "        v5 = await n5(v2, v3)\n"
        "        return await n6(v4, v5, v1)\n"
        "    finally:\n"
        "        try:\n"
        "            await g1.__anext__()\n"
        "        except StopAsyncIteration:\n"
        "            pass\n"
    )
    _exec("\n".join(src), ns, "fastapi hand-written")
    app = FastAPI()
    app.get("/graph")(ns["route"])
    return app, ns


def _hand_yield(g: Graph) -> tuple[Any, dict[str, Any]]:
    """The hand-written route behind one empty ``yield`` dependency (a reference)."""
    from fastapi import Depends, FastAPI, Request

    _, ns = _hand(g)
    route = ns["route"]

    async def held(request: Request) -> Any:
        yield request

    async def held_route(user_id: str, held: Annotated[Request, Depends(held)]) -> int:
        result: int = await route(user_id)
        return result

    app = FastAPI()
    app.get("/graph")(held_route)
    return app, ns


def _resolvent(g: Graph) -> tuple[Any, dict[str, Any]]:
    from fastapi import FastAPI

    from resolvent.starlette import inject

    from .impls import resolvent_setup

    container, handler, ns = resolvent_setup(g)
    app = FastAPI(lifespan=container.lifespan)
    app.get("/graph")(inject(container)(handler))
    return app, ns


def _depends(g: Graph) -> tuple[Any, dict[str, Any]]:
    from fastapi import Depends, FastAPI

    ns = _namespace(g, Depends=Depends, app_once=_app_once)
    src = []
    for i, n in enumerate(g.nodes):
        text = node_source(
            i, n, lambda j: f"d{j}: Annotated[int, Depends(n{j})]", "user_id: str", ""
        )
        if n.app:
            text += f"n{i} = app_once(n{i})\n"
        src.append(text)
    src.append(
        f"async def route(user_id: str, r: Annotated[int, Depends(n{g.root})]) -> int:\n"
        "    return r\n"
    )
    _exec("\n".join(src), ns, "fastapi depends")
    app = FastAPI()
    app.get("/graph")(ns["route"])
    return app, ns


def _user_source() -> str:
    return (
        "def user_from_request(request: Request) -> UserId:\n"
        "    return UserId(request.query_params['user_id'])\n"
    )


def _dishka(g: Graph) -> tuple[Any, dict[str, Any]]:
    from dishka import Provider, Scope, make_async_container
    from dishka.integrations.fastapi import FastapiProvider, FromDishka, inject, setup_dishka
    from fastapi import FastAPI, Request

    ns = _typed_namespace(g, Request=Request, FromDishka=FromDishka)
    src = [*_typed_sources(g), _user_source()]
    src.append(f"async def route(user_id: str, r: FromDishka[T{g.root}]) -> int:\n    return r\n")
    _exec("\n".join(src), ns, "fastapi dishka")
    provider = Provider(scope=Scope.REQUEST)
    for i, node in enumerate(g.nodes):
        provider.provide(
            ns[f"n{i}"], provides=ns[f"T{i}"], scope=Scope.APP if node.app else Scope.REQUEST
        )
    provider.provide(ns["user_from_request"], scope=Scope.REQUEST)
    container = make_async_container(provider, FastapiProvider())

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        yield
        await container.close()

    app = FastAPI(lifespan=lifespan)
    app.get("/graph")(inject(ns["route"]))
    setup_dishka(container, app)
    return app, ns


def _wireup(g: Graph) -> tuple[Any, dict[str, Any]]:
    import wireup as wu
    import wireup.integration.fastapi
    from fastapi import FastAPI, Request
    from wireup.integration.starlette import request_factory

    ns = _typed_namespace(g, Request=Request, Injected=wu.Injected)
    src = [*_typed_sources(g), _user_source()]
    src.append(f"async def route(user_id: str, r: Injected[T{g.root}]) -> int:\n    return r\n")
    _exec("\n".join(src), ns, "fastapi wireup")
    injectables = [
        wu.injectable(ns[f"n{i}"], lifetime="singleton" if node.app else "scoped")
        for i, node in enumerate(g.nodes)
    ]
    injectables += [wu.injectable(ns["user_from_request"], lifetime="scoped"), request_factory]
    container = wu.create_async_container(injectables=injectables)
    app = FastAPI()
    app.get("/graph")(ns["route"])
    wireup.integration.fastapi.setup(container, app)
    return app, ns


VARIANTS: dict[str, Callable[[Graph], tuple[Any, dict[str, Any]]]] = {
    "hand-written": _hand,
    "resolvent": _resolvent,
    "fastapi-depends": _depends,
    "dishka": _dishka,
    "wireup": _wireup,
}
REFERENCES = {"hand-written + one yield Depends": _hand_yield}


async def build(variant: str, stack: contextlib.AsyncExitStack) -> Instance:
    """The variant's app, its lifespan entered, and a client calling it in process."""
    import httpx

    app, ns = {**VARIANTS, **REFERENCES}[variant](graph())
    await stack.enter_async_context(app.router.lifespan_context(app))
    transport = httpx.ASGITransport(app=app)
    client = await stack.enter_async_context(
        httpx.AsyncClient(transport=transport, base_url="http://bench")
    )
    get = client.get

    async def once() -> Any:
        response = await get(URL)
        if response.status_code != 200:
            raise RuntimeError(f"{variant}: HTTP {response.status_code}: {response.text[:200]}")
        return response.json()

    return _instance(ns, once)


def _factory(variant: str) -> Callable[[contextlib.AsyncExitStack], Awaitable[Instance | str]]:
    async def factory(stack: contextlib.AsyncExitStack) -> Instance | str:
        return await build(variant, stack)

    return factory


def scenario() -> Scenario:
    g = graph()
    return Scenario(
        "FastAPI",
        TITLE,
        g,
        {name: _factory(name) for name in VARIANTS},
        references={name: _factory(name) for name in REFERENCES},
        nodes=len(g.nodes),
    )
