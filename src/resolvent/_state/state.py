"""`State`: one kind of state, its settings and its three resolvers (`new`, `read`,
`edit`); and the store a kind names, opened as an APP resource of the container.
"""

from __future__ import annotations

import inspect
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, Field

# The public package imports this module itself (`resolvent.State`): importing it back
# would be a circle, so even the public names come from the interface.
from .._integration import (
    IMPLICIT_SCOPE,
    LASTING,
    MemoryStore,
    Resolve,
    Scope,
    StateKey,
    StateStore,
    open_store,
    redact,
    settles,
)
from . import LEDGER as _LEDGER
from . import Held, Ledger, Loaded, call_ledger, current_principal, owner_digest
from .access import Access
from .idempotency import IDEMPOTENCY_KEY, KEY_ARGUMENT, make_idempotent, receipt_name
from .leases import Lease, Leases, keep_leases

__all__ = ("Handle", "State", "memory_store")

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")

Handle = Annotated[
    str,
    Field(
        description=(
            "Handle of state the server keeps for you, returned by an earlier call. "
            "Pass it back unchanged."
        )
    ),
]
"""A described string for a handle parameter: ``cart: Handle`` shows MCP clients (and
OpenAPI) what the argument is. A plain ``str`` works too."""

_HANDLE_BYTES = 24  # 192 bits, 32 URL-safe characters
_PRINCIPAL = "resolvent_principal"
_STORE = "resolvent_store"
_LEASES = "resolvent_leases"


async def memory_store() -> AsyncIterator[StateStore]:
    """The default store: a `MemoryStore` per container, opened on first use, APP scope."""
    store = MemoryStore()
    try:
        yield store
    finally:
        await store.aclose()


setattr(memory_store, IMPLICIT_SCOPE, Scope.APP)

_URL_STORES: dict[str, Callable[..., Any]] = {}


def _url_store(url: str) -> Callable[..., Any]:
    """One APP provider per store URL, so kinds naming the same URL share one store."""
    found = _URL_STORES.get(url)
    if found is not None:
        return found

    async def state_store() -> AsyncIterator[StateStore]:
        async with open_store(url) as store:
            yield store

    # Messages name it as the public call it stands for: resolvent.open_store('redis://...').
    state_store.__module__ = "resolvent"
    state_store.__qualname__ = f"open_store({redact(url)!r})"
    setattr(state_store, IMPLICIT_SCOPE, Scope.APP)
    _URL_STORES[url] = state_store
    return state_store


class State(Access[M]):
    """One kind of state kept across calls: a pydantic model stored under handles.

    ```python
    class Cart(BaseModel):
        items: dict[str, int] = {}

    carts = State("cart", Cart, store="sqlite:///carts.db")

    async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> str:
        return cart.handle

    async def add_item(
        cart: Handle, item: str, edit: Annotated[Held[Cart], Resolve(carts.edit)]
    ) -> dict[str, int]:
        edit.value.items[item] = edit.value.items.get(item, 0) + 1
        return edit.value.items
    ```

    Its resolvers: `new` mints a handle for the caller's principal and stores the
    model's initial value when the call succeeds; `read` gives the current value of the
    handle in the call argument named *argument*; `edit` gives it as a `Held`, holding
    a lease on the handle until the call ends, then writes the change only if the
    handler succeeded (an error or cancellation writes nothing). A handle that is
    unknown, expired, deleted or another principal's raises `StateNotFound`, with one
    and the same message.

    Args:
        name: the kind's name, part of every key and message (``"cart"``).
        model: the pydantic model of the values.
        store: where values live: a store URL (see `open_store`), or an APP-scoped
            provider of a `StateStore` (so its opening and closing are the container's
            APP lifetime; a shorter-lived one is refused at compile time). Default: one
            `MemoryStore` per container.
        principal: a resolver naming the caller (it may take framework values such as
            the MCP ``Context``). Default: the authenticated MCP principal, else
            `ANONYMOUS`.
        argument: the call argument carrying the handle (default: *name*).
        idle_ttl: seconds a value lives after its last use; every read and edit
            refreshes it.
        max_lifetime: seconds a value lives at most after its creation, used or not.
        max_size: bytes a stored value may take at most (default 1 MB).
        version: the schema version written with every value.
        migrate: ``migrate(old_version, data) -> data`` turns the JSON data of an older
            version into data the model validates; without it, such a value is an error.
            It is never called for a newer version: such a value is a `StateError`, and
            nothing is written back.
        lease: seconds an edit's lease on its handle outlives its last renewal. A
            live edit renews it every quarter of that time and keeps the handle as long
            as it runs; a dead one (a killed process, a lost connection) frees it at
            most *lease* seconds later. Keep it below *wait*.
        wait: seconds an edit or read waits for another call's lease before failing
            with `StateConflict`.
        initial: makes the value `new` starts from (default: ``model()``).
        idempotency_ttl: seconds the result of a call made with an idempotency key is
            kept for its repeats (see `idempotent`); a day by default.
    """

    def __init__(
        self,
        name: str,
        model: type[M],
        *,
        store: str | Callable[..., Any] | None = None,
        principal: Callable[..., Any] | None = None,
        argument: str | None = None,
        idle_ttl: float = 3600.0,
        max_lifetime: float = 7 * 86400.0,
        max_size: int = 1_000_000,
        version: int = 1,
        migrate: Callable[[int, Any], Any] | None = None,
        lease: float = 4.0,
        wait: float = 10.0,
        initial: Callable[[], M] | None = None,
        idempotency_ttl: float = 86400.0,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"State name {name!r}: use letters, digits, '_', '.' or '-'")
        argument = name if argument is None else argument
        if not argument.isidentifier():
            raise ValueError(
                f"State {name!r}: the handle's call argument {argument!r} is not a valid "
                "parameter name.\n  fix: pass argument='...' with a Python identifier"
            )
        for label, seconds in (
            ("idle_ttl", idle_ttl),
            ("max_lifetime", max_lifetime),
            ("lease", lease),
            ("idempotency_ttl", idempotency_ttl),
        ):
            if not seconds > 0:  # NaN too: it would compare false with every deadline
                raise ValueError(
                    f"State {name!r}: {label} must be a positive number of seconds, not "
                    f"{seconds!r}\n  fix: pass {label}= a number above 0, or leave it out "
                    "for its default"
                )
        self.name = name
        self.model = model
        self.argument = argument
        self.idle_ttl = float(idle_ttl)
        self.max_lifetime = float(max_lifetime)
        self.max_size = max_size
        self.version = version
        self.migrate = migrate
        self.lease = float(lease)
        self.wait = float(wait)
        self.idempotency_ttl = float(idempotency_ttl)
        self.initial: Callable[[], M] = model if initial is None else initial
        self._header = b"%d\n" % version
        if store is None:
            store = memory_store
        elif isinstance(store, str):
            store = _url_store(store)
        self.store: Callable[..., Any] = store
        """The APP provider of this kind's store (pass it to ``Container(warm=...)`` to
        open the store at start-up)."""
        self.principal: Callable[..., Any] = current_principal if principal is None else principal
        self.new = self._make_new()
        self.read = self._make_read()
        self._keeper = self._make_keeper()
        self.edit = self._make_edit()

    def __repr__(self) -> str:
        return f"State({self.name!r}, {self.model.__qualname__})"

    def idempotent(self, fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        """Give a handler that edits this state an optional ``idempotency_key`` argument,
        so a client that retries a call (its connection broke before the answer came)
        does not apply it twice.

        ```python
        @server.tool()
        @inject(container)
        @carts.idempotent
        async def add_item(
            cart: Handle, item: str, edit: Annotated[Held[Cart], Resolve(carts.edit)]
        ) -> Items: ...
        ```

        A call with a key that an earlier call of the same handler already committed,
        for the same principal and handle, returns that call's result (as the handler's
        return annotation validates it) and edits nothing. The result is kept in the
        store, written in the same atomic step as the edit, for *idempotency_ttl*
        seconds. A call without a key, or one that failed, keeps nothing.

        Raises:
            ValueError: *fn* has no parameter ``Annotated[Held[...], Resolve(state.edit)]``,
                or already has one named ``idempotency_key``.
            TypeError: *fn* is not a function (a callable object, a ``partial``).
        """
        return make_idempotent(self, self.edit, self._make_edit, fn)

    # -- the resolvers -----------------------------------------------------------------

    def _signature(
        self,
        fn: Callable[..., Any],
        verb: str,
        returns: Any,
        *,
        handle: bool,
        leases: Callable[..., Any] | None = None,
        keyed: bool = False,
    ) -> None:
        params: list[tuple[str, Any]] = []
        if handle:
            params.append((self.argument, str))
        if keyed:  # the call's idempotency key: a call argument of the handler
            params.append((IDEMPOTENCY_KEY, KEY_ARGUMENT))
        params += [
            (_PRINCIPAL, Annotated[str, Resolve(self.principal)]),
            (_STORE, Annotated[StateStore, Resolve(self.store)]),
            (_LEDGER, Annotated[Ledger, Resolve(call_ledger)]),
        ]
        if leases is not None:
            params.append((_LEASES, Annotated[Leases, Resolve(leases)]))
        kw = inspect.Parameter.KEYWORD_ONLY
        fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(n, kw, annotation=a) for n, a in params],
            return_annotation=returns,
        )
        fn.__annotations__ = {**dict(params), "return": returns}
        fn.__name__ = verb
        fn.__qualname__ = f"State[{self.name!r}].{verb}"
        fn.__module__ = "resolvent"
        fn.__doc__ = f"The {self.name} {'for' if handle else 'this call creates'} ({verb})."
        why = (
            "a store opened per call or session would be closed, its values with it, "
            f"and every {self.name} handle would be not found or expired"
        )
        setattr(fn, LASTING, {_STORE: (f"the store of its {self.name}s", why)})

    def _make_new(self) -> Callable[..., AsyncIterator[Held[M]]]:
        state = self

        async def new(**kw: Any) -> AsyncIterator[Held[M]]:
            handle = secrets.token_urlsafe(_HANDLE_BYTES)
            held = Held(handle, state.initial())
            yield held  # an exception here propagates: nothing was stored
            ledger: Ledger = kw[_LEDGER]
            if held.deleted or ledger.refused:
                return
            key = StateKey(state.name, owner_digest(str(kw[_PRINCIPAL])), handle)
            store: StateStore = kw[_STORE]
            try:
                data = state._encode(handle, held.value)
                await store.create(key, data, state.idle_ttl, state.max_lifetime)
            except BaseException:
                ledger.refused = True
                raise
            ledger.written.append((state.name, handle))

        self._signature(new, "new", AsyncIterator[Held[self.model]], handle=False)  # type: ignore[name-defined]
        return settles(new)

    def _make_read(self) -> Callable[..., Any]:
        state, argument = self, self.argument

        async def read(**kw: Any) -> M:
            key = state._key(kw[argument], kw[_PRINCIPAL])
            return await state._look(kw[_LEDGER], kw[_STORE], key)

        self._signature(read, "read", self.model, handle=True)
        return read

    def _make_keeper(self) -> Callable[..., AsyncIterator[Leases]]:
        async def lease_keeper(**kw: Any) -> AsyncIterator[Leases]:
            async with keep_leases(kw[_STORE]) as leases:
                yield leases

        params = {_STORE: Annotated[StateStore, Resolve(self.store)]}
        kw = inspect.Parameter.KEYWORD_ONLY
        lease_keeper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(n, kw, annotation=a) for n, a in params.items()],
            return_annotation=AsyncIterator[Leases],
        )
        lease_keeper.__annotations__ = {**params, "return": AsyncIterator[Leases]}
        # Not named like the State's own resolvers: tracing reads those as loads and saves.
        lease_keeper.__qualname__ = lease_keeper.__name__ = "lease_keeper"
        lease_keeper.__module__ = "resolvent._state.leases"
        setattr(lease_keeper, IMPLICIT_SCOPE, Scope.APP)
        return lease_keeper

    def _make_edit(self, tool: str | None = None) -> Callable[..., Editing[M]]:
        """The `edit` resolver; for the `idempotent` handler named *tool*, an edit that
        also takes the call's idempotency key and finds the result kept for it as it
        loads the handle, in the same round trip."""
        state = self

        def edit(**kw: Any) -> Editing[M]:
            editing: Editing[M] = Editing()
            editing.state, editing.tool, editing.kw = state, tool, kw
            return editing

        self._signature(
            edit,
            "edit",
            AbstractAsyncContextManager[Held[self.model]],  # type: ignore[name-defined]
            handle=True,
            leases=self._keeper,
            keyed=tool is not None,
        )
        return settles(edit)


class Editing(Generic[M]):
    """One call's edit of one handle, the `edit` resolver's resource: entering it loads
    the value under the call's lease; leaving it writes the change if the call succeeded
    (settling, before the answer leaves), else releases the lease without writing.

    A class rather than an async generator: no per-call bookkeeping of the event loop's
    async-generator hooks, on the path every edit takes."""

    __slots__ = ("entry", "held", "key", "kw", "lease", "state", "tool")

    state: State[M]
    tool: str | None
    kw: dict[str, Any]
    key: StateKey
    held: Held[M]
    entry: Loaded | None
    lease: Lease

    async def __aenter__(self) -> Held[M]:
        state, kw = self.state, self.kw
        key = self.key = state._key(kw[state.argument], kw[_PRINCIPAL])  # pyright: ignore[reportPrivateUsage]
        ledger: Ledger = kw[_LEDGER]
        leases: Leases = kw[_LEASES]
        name = None
        if self.tool is not None and kw[IDEMPOTENCY_KEY] is not None:
            name = receipt_name(self.tool, kw[IDEMPOTENCY_KEY])
        self.entry = None  # until loaded: nothing to settle
        held, entry = await state._take(ledger, kw[_STORE], key, leases, name)  # pyright: ignore[reportPrivateUsage]
        if entry is not None:  # else another parameter of this call edits it, and writes it
            # Counted from the answer, not the request: the load may have waited long for
            # another call's lease (the compare-and-set of the save covers the latency).
            self.lease = leases.hold(key, ledger.token, state.lease, time.monotonic())
            self.entry = entry
        self.held = held
        return held

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        entry = self.entry
        if entry is None:
            return
        state, kw, lease = self.state, self.kw, self.lease
        store: StateStore = kw[_STORE]
        ledger: Ledger = kw[_LEDGER]
        try:
            if exc is not None:  # the call failed or was cancelled: write nothing
                await state._release(store, self.key, ledger.token)  # pyright: ignore[reportPrivateUsage]
            else:
                await state._commit(store, self.key, ledger, self.held, entry, lease)  # pyright: ignore[reportPrivateUsage]
        finally:
            kw[_LEASES].drop(lease)
