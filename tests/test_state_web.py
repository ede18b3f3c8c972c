"""State in FastAPI and Starlette routes: the same resolvers as in MCP tools.

Starlette's TestClient (a real ASGI app with its lifespan). The CALL scope of a web route
closes after the response is sent; the edit's lease makes the next request read the value
written, and a route maps `StateNotFound` to 404 with an ordinary exception handler.
"""

from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel

from resolvent import Container, Handle, Held, Resolve, State, StateNotFound
from state_helpers import stores_and_modes

fastapi = pytest.importorskip("fastapi")
from fastapi.responses import JSONResponse  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402

from resolvent.starlette import inject  # noqa: E402
from starlette_apps import MODES as WEB_MODES  # noqa: E402
from starlette_apps import cart_not_found, cart_routes  # noqa: E402


class Cart(BaseModel):
    items: dict[str, int] = {}


def make_app(store: str) -> fastapi.FastAPI:
    container = Container()
    carts = State("cart", Cart, store=store)
    app = fastapi.FastAPI(lifespan=container.lifespan)

    @app.exception_handler(StateNotFound)
    async def not_found(request: Request, exc: StateNotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc).splitlines()[0]}, status_code=404)

    @app.post("/carts")
    @inject(container)
    async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> dict[str, str]:
        return {"cart": cart.handle}

    @app.post("/carts/{cart}/items/{item}")
    @inject(container)
    async def add_item(
        cart: Handle, item: str, edit: Annotated[Held[Cart], Resolve(carts.edit)]
    ) -> dict[str, int]:
        edit.value.items[item] = edit.value.items.get(item, 0) + 1
        return edit.value.items

    @app.get("/carts/{cart}")
    @inject(container)
    async def show_cart(
        cart: Handle, value: Annotated[Cart, Resolve(carts.read)]
    ) -> dict[str, int]:
        return value.items

    return app


@pytest.mark.parametrize("store", ["memory:", "sqlite"])
def test_fastapi_routes_keep_a_cart(store: str, tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/carts.db" if store == "sqlite" else store
    with TestClient(make_app(url)) as web:
        handle = web.post("/carts").json()["cart"]
        for count in range(1, 6):  # each request reads what the one before wrote
            assert web.post(f"/carts/{handle}/items/apple").json() == {"apple": count}
            assert web.get(f"/carts/{handle}").json() == {"apple": count}
        missing = web.get(f"/carts/{'A' * 32}")
        assert missing.status_code == 404
        assert "not found or expired" in missing.json()["detail"]
    if store == "sqlite":  # a second app (another worker) on the same file sees it
        with TestClient(make_app(url)) as other:
            assert other.get(f"/carts/{handle}").json() == {"apple": 5}


# -- Starlette endpoints: the handle from the path or the query string --------------------


@pytest.fixture
def store_url(store_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    kind = store_kind
    if kind == "redis":
        return str(request.getfixturevalue("valkey_url"))
    return f"sqlite:///{tmp_path}/carts.db" if kind == "sqlite" else "memory:"


@stores_and_modes(list(WEB_MODES), backend="backend")
def test_starlette_routes_take_the_handle_from_the_path_or_the_query(
    store_url: str, backend: str, mode: str
) -> None:
    container = Container(**WEB_MODES[mode])
    app = Starlette(
        routes=cart_routes(container, store_url),
        lifespan=container.lifespan,
        exception_handlers={StateNotFound: cart_not_found},
    )
    with TestClient(app, backend=backend) as web:
        handle = web.post("/carts").json()["cart"]
        assert web.post(f"/carts/{handle}/items/apple").json() == {"apple": 1}
        added = web.post(f"/carts/{handle}/items/apple", params={"qty": "2"})
        assert added.json() == {"apple": 3}
        assert web.get(f"/carts/{handle}").json() == {"apple": 3}
        assert web.get("/cart", params={"cart": handle}).json() == {"apple": 3}
        # The client's mistakes are 400s naming the parameter; a stale handle is a 404.
        missing = web.get("/cart")
        assert (missing.status_code, missing.text) == (400, "show_cart needs 'cart', a path or query parameter")  # fmt: skip
        wrong = web.post(f"/carts/{handle}/items/apple", params={"qty": "many"})
        assert (wrong.status_code, wrong.text) == (400, "query parameter 'qty' of add_item is not an int")  # fmt: skip
        assert web.get(f"/carts/{'A' * 32}").status_code == 404
        assert web.get(f"/carts/{handle}").json() == {"apple": 3}
