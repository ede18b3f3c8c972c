"""State kept across calls: pydantic values in a shared store, addressed by handles.

A `State` declares one kind of state ("cart": a model, a store, expiry). Its three
resolvers give a handler a new value (`State.new`), a value to read (`State.read`) or to
change (`State.edit`). The handle is an ordinary call argument the handler declares; every
access checks it against the caller's principal; an edit holds a lease on the handle from
resolution to the end of the call and writes only if the handler succeeded.

State is data, not a live object, and not a scope: APP, SESSION and CALL hold objects in
one process, state outlives processes (see docs/state.md).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import random
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, Generic, TypeVar

import anyio
from pydantic import BaseModel, Field, ValidationError

# The public package imports this module itself (`resolvent.State`): importing it back
# would be a circle, so even the public names come from the interface.
from ._integration import (
    IMPLICIT_SCOPE,
    LASTING,
    MemoryStore,
    Resolve,
    Scope,
    StateConflict,
    StateError,
    StateKey,
    StateNotFound,
    StateStore,
    StateTooLarge,
    StoreUnavailable,
    inline,
    logger,
    open_store,
    redact,
    settles,
)
from ._leases import Lease, Leases, keep_leases

__all__ = ("ANONYMOUS", "Handle", "Held", "State", "add_principal_source", "memory_store")

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")

ANONYMOUS = "anonymous"
"""The principal of a caller nobody authenticated."""

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
_HANDLE = re.compile(r"[A-Za-z0-9_-]{32}")
_PRINCIPAL = "resolvent_principal"
_STORE = "resolvent_store"
_LEDGER = "resolvent_call"
_LEASES = "resolvent_leases"

# -- principals ---------------------------------------------------------------------------

_SOURCES: list[Callable[[], str | None]] = []


def add_principal_source(source: Callable[[], str | None]) -> None:
    """Let an integration name the caller: *source()* returns a principal or None.

    ``resolvent.mcp`` adds the SDK's authenticated token (its subject, else its client
    id). The first source that names someone wins; nobody named is `ANONYMOUS`.
    """
    if source not in _SOURCES:
        _SOURCES.append(source)


@inline
def current_principal() -> str:
    """The caller's principal: the first integration source that names one, else anonymous."""
    for source in _SOURCES:
        found = source()
        if found:
            return found
    return ANONYMOUS


@functools.lru_cache(maxsize=4096)
def _owner(principal: str) -> str:
    # Stores see a digest: the principal is never kept in clear.
    return hashlib.blake2b(principal.encode(), digest_size=16).hexdigest()


class _Loaded:
    """One handle as a call loaded it: *held* if the call edits it (under its lease),
    else the *value* it read; *data* as stored. *ready* once loaded, *failed* if not."""

    __slots__ = (
        "data",
        "failed",
        "held",
        "model",
        "ready",
        "receipt",
        "replayed",
        "value",
        "waiters",
        "where",
    )

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model
        self.data = b""
        self.held: Held[Any] | None = None
        self.value: Any = None
        self.ready = self.failed = False
        self.waiters: anyio.Event | None = None
        # For `State.idempotent`: where an edited value lives, the result to keep with its
        # save, and whether the call repeats one already committed (then it writes nothing).
        self.where: tuple[StateStore, StateKey] | None = None
        self.receipt: tuple[str, bytes] | None = None
        self.replayed = False

    def done(self, *, failed: bool = False) -> None:
        self.ready, self.failed = True, failed
        if self.waiters is not None:
            self.waiters.set()


class Ledger:
    """One call's lease token, the handles it has loaded and what it has written.

    Every parameter of a call that reaches one handle (``merge(src=h, dst=h)``) goes
    through its entry here: one load, one lease, one value, one write.
    """

    __slots__ = ("loaded", "refused", "token", "written")

    def __init__(self) -> None:
        self.token = secrets.token_hex(8)  # the lease owner for every edit in this call
        self.loaded: dict[tuple[int, StateKey], _Loaded] = {}
        self.written: list[str] = []  # "cart 'H'", for messages
        self.refused = False  # a write was refused: the call's other writes are not made

    def entry(self, store: StateStore, key: StateKey) -> _Loaded | None:
        return self.loaded.get((id(store), key))

    def open(self, store: StateStore, key: StateKey, model: type[BaseModel]) -> _Loaded:
        entry = self.loaded[(id(store), key)] = _Loaded(model)
        return entry

    def drop(self, store: StateStore, key: StateKey, entry: _Loaded) -> None:
        if self.loaded.get((id(store), key)) is entry:
            del self.loaded[(id(store), key)]
        entry.done(failed=True)


@inline
def call_ledger() -> Ledger:
    """Per call: the `Ledger` every state resolver of the call shares."""
    return Ledger()


# -- stores as APP resources ---------------------------------------------------------------


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


# -- the value being created or edited -------------------------------------------------------


class Held(Generic[M]):
    """A value this call creates (`State.new`) or edits (`State.edit`).

    Change ``value`` in place or assign a new one; call `delete` to remove it. The change
    is written when the call ends, only if the handler succeeded.

    Attributes:
        handle: the handle the client passes back to reach this value again.
        value: the value (a model instance).
    """

    __slots__ = ("_deleted", "handle", "value")

    def __init__(self, handle: str, value: M) -> None:
        self.handle = handle
        self.value = value
        self._deleted = False

    def delete(self) -> None:
        """Remove the value when the call succeeds; the handle is not found afterwards."""
        self._deleted = True

    @property
    def deleted(self) -> bool:
        """Whether `delete` was called."""
        return self._deleted

    def __repr__(self) -> str:
        return f"Held({self.handle!r}, {self.value!r}{', deleted' if self._deleted else ''})"


# -- a kind of state ---------------------------------------------------------------------------


class State(Generic[M]):
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
            if seconds <= 0:
                raise ValueError(f"State {name!r}: {label} must be positive, not {seconds}")
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
        """
        return _idempotent(self, fn)

    # -- the resolvers -----------------------------------------------------------------

    def _signature(
        self,
        fn: Callable[..., Any],
        verb: str,
        returns: Any,
        *,
        handle: bool,
        leases: Callable[..., Any] | None = None,
    ) -> None:
        params: list[tuple[str, Any]] = []
        if handle:
            params.append((self.argument, str))
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
            key = StateKey(state.name, _owner(str(kw[_PRINCIPAL])), handle)
            store: StateStore = kw[_STORE]
            try:
                data = state._encode(handle, held.value)
                await store.create(key, data, state.idle_ttl, state.max_lifetime)
            except BaseException:
                ledger.refused = True
                raise
            ledger.written.append(f"{state.name} {handle!r}")

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
        lease_keeper.__module__ = "resolvent._leases"
        setattr(lease_keeper, IMPLICIT_SCOPE, Scope.APP)
        return lease_keeper

    def _make_edit(self) -> Callable[..., AsyncIterator[Held[M]]]:
        state, argument = self, self.argument

        async def edit(**kw: Any) -> AsyncIterator[Held[M]]:
            key = state._key(kw[argument], kw[_PRINCIPAL])
            store: StateStore = kw[_STORE]
            ledger: Ledger = kw[_LEDGER]
            leases: Leases = kw[_LEASES]
            token = ledger.token
            held, loaded = await state._take(ledger, store, key, leases)
            if loaded is None:  # another parameter of this call edits it, and writes it
                yield held
                return
            # Counted from the answer, not the request: the load may have waited long for
            # another call's lease (the compare-and-set of the save covers the latency).
            lease = leases.hold(key, token, state.lease, anyio.current_time())
            try:
                try:
                    yield held
                except BaseException:
                    await state._release(store, key, token)
                    raise
                await state._commit(store, key, ledger, held, loaded, lease)
            finally:
                leases.drop(lease)

        self._signature(
            edit,
            "edit",
            AsyncIterator[Held[self.model]],  # type: ignore[name-defined]
            handle=True,
            leases=self._make_keeper(),
        )
        return settles(edit)

    # -- the work ------------------------------------------------------------------------

    def _key(self, handle: Any, principal: Any) -> StateKey:
        if type(handle) is not str or not _HANDLE.fullmatch(handle):
            raise self._not_found(handle)
        return StateKey(self.name, _owner(str(principal)), handle)

    def _not_found(self, handle: Any) -> StateNotFound:
        shown = repr(handle) if len(repr(handle)) <= 48 else repr(handle)[:45] + "..."
        return StateNotFound(
            f"{self.name} {shown} not found or expired.\n"
            f"  fix: pass a handle this server returned to you for a {self.name}, "
            "and use it before it expires; otherwise create a new one"
        )

    async def _look(self, ledger: Ledger, store: StateStore, key: StateKey) -> M:
        """The value of *key* for a read: the one this call loaded already (an edit's,
        changes included), else loaded now."""
        seen = ledger.entry(store, key)
        if seen is not None:
            await self._wait_loaded(seen, key)
            shared: M = seen.value if seen.held is None else seen.held.value
            return shared
        entry = ledger.open(store, key, self.model)
        try:
            data = await self._load(store, key, ledger.token, 0.0)
            entry.value = self._decode(key, data)
        except BaseException:
            ledger.drop(store, key, entry)
            raise
        entry.data = data
        entry.done()
        return entry.value  # type: ignore[no-any-return]

    async def _take(
        self, ledger: Ledger, store: StateStore, key: StateKey, leases: Leases
    ) -> tuple[Held[M], bytes | None]:
        """*key* for an edit, under this call's lease: ``(held, data as loaded)``, or
        ``(held, None)`` when another parameter of this call edits it already (it
        writes it). A value this call read already is the one it edits, if nothing
        changed it since; else `StateConflict`, before anything is written."""
        seen = ledger.entry(store, key)
        if seen is not None:
            await self._wait_loaded(seen, key)
            if seen.held is not None:
                return seen.held, None
            entry = seen  # read earlier in this call: lease it now
            entry.ready, entry.waiters = False, None
        else:
            entry = ledger.open(store, key, self.model)
        token = ledger.token
        try:
            loaded = await self._load(store, key, token, self.lease)
        except BaseException as exc:
            ledger.drop(store, key, entry)
            if not isinstance(exc, StateNotFound | StateConflict):
                # Cancelled, or the store failed, after the lease may have been granted:
                # released in the background, so a call_timeout holds even then.
                leases.later(functools.partial(self._release, store, key, token))
            raise
        try:
            if seen is None:
                value = self._decode(key, loaded)
            elif loaded == seen.data:
                value = seen.value
            else:
                raise StateConflict(
                    f"{self.name} {key.handle!r} was changed by another call between this "
                    "call's read of it and its edit; nothing of this call was written.\n"
                    "  fix: try again"
                )
        except BaseException:
            ledger.drop(store, key, entry)
            await self._release(store, key, token)
            raise
        entry.data, entry.held = loaded, Held(key.handle, value)
        entry.where = (store, key)
        entry.done()
        return entry.held, loaded

    async def _wait_loaded(self, entry: _Loaded, key: StateKey) -> None:
        """Wait for another parameter of this call that loads *key*; refuse a model
        other than the one it loaded."""
        while not entry.ready:  # (an edit may lease a value read, meanwhile: wait again)
            if entry.waiters is None:
                entry.waiters = anyio.Event()
            await entry.waiters.wait()
        if entry.failed:
            raise StateError(
                f"{self.name} {key.handle!r} could not be loaded for another parameter of "
                "this call (its error is the call's); nothing of this call was written"
            )
        if entry.model is not self.model:
            raise StateError(
                f"{self.name} {key.handle!r} is reached in one call through two State "
                f"kinds with different models, {entry.model.__qualname__} and "
                f"{self.model.__qualname__}; nothing of this call was written.\n"
                f"  fix: give the kinds different names, or the same model"
            )

    async def _load(self, store: StateStore, key: StateKey, token: str, lease: float) -> bytes:
        try:
            data = await store.load(key, self.idle_ttl, token, lease)
        except StateConflict:
            data = await self._wait_for(store, key, token, lease)
        if data is None:
            raise self._not_found(key.handle)
        return data

    async def _wait_for(
        self, store: StateStore, key: StateKey, token: str, lease: float
    ) -> bytes | None:
        """Retry *load* while another call's lease holds the key, at most `wait` seconds."""
        give_up = anyio.current_time() + self.wait
        delay = 0.001
        while True:
            await anyio.sleep(delay * (0.5 + random.random()))
            try:
                return await store.load(key, self.idle_ttl, token, lease)
            except StateConflict:
                if anyio.current_time() >= give_up:
                    raise StateConflict(
                        f"{self.name} {key.handle!r} is being changed by another call, "
                        f"which held it for longer than this call waits ({self.wait:g} s); "
                        "nothing was changed.\n"
                        "  fix: try again; if edits often take this long, raise "
                        f"State({self.name!r}, ..., wait=...)"
                    ) from None
                delay = min(delay * 2, 0.05)

    async def _release(self, store: StateStore, key: StateKey, token: str) -> None:
        """End the lease without writing: the handler failed or was cancelled. Bounded by
        the lease time: past it, the unrenewed lease has lapsed by itself."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.lease):
            try:
                await store.save(key, self.idle_ttl, token, None, False)
            except StoreUnavailable:  # the call fails saying so; the lease lapses by itself
                pass
            except Exception:  # the lease runs out by itself; the handler's error matters
                logger.error("resolvent: could not release %s %r", self.name, key.handle)

    async def _commit(
        self,
        store: StateStore,
        key: StateKey,
        ledger: Ledger,
        held: Held[M],
        loaded: bytes,
        lease: Lease,
    ) -> None:
        token = ledger.token
        if ledger.refused:  # another write of this call was refused: write nothing more
            await self._release(store, key, token)
            return
        if not lease.held():
            await self._release(store, key, token)
            raise self._refused(
                key,
                ledger,
                "this call lost its lease (the store refused its renewal, or did not "
                f"confirm one within {self.lease:g} s), so another call may have changed it",
            )
        try:
            entry = ledger.entry(store, key)
            receipt = None if entry is None else entry.receipt
            if entry is not None and entry.replayed:  # the first call wrote it all
                data, delete = None, False
            elif held.deleted:
                data, delete = None, True
            else:
                data, delete = self._encode(key.handle, held.value), False
                if data == loaded:
                    data = None  # unchanged: only end the lease
            if receipt is not None:
                remember = (*receipt, self.idempotency_ttl)
                saved = await store.save(key, self.idle_ttl, token, data, delete, remember)
            else:
                saved = await store.save(key, self.idle_ttl, token, data, delete)
        except BaseException:
            ledger.refused = True
            await self._release(store, key, token)
            raise
        if saved:
            if data is not None or delete:
                ledger.written.append(f"{self.name} {key.handle!r}")
            return
        raise self._refused(
            key,
            ledger,
            f"this call's lease lapsed (unrenewed for {self.lease:g} s) and another call "
            "changed or removed it meanwhile",
        )

    def _refused(self, key: StateKey, ledger: Ledger, why: str) -> StateConflict:
        """The error of a write refused for a lost lease; no other write of the call is made."""
        ledger.refused = True
        if ledger.written:
            written = "nothing of this change was written, but this call's changes to "
            written += ", ".join(ledger.written) + " were"
        else:
            written = "nothing of this call was written"
        return StateConflict(
            f"{self.name} {key.handle!r} was not saved: {why}; {written}.\n"
            f"  fix: try again; if the store is slow to answer, raise "
            f"State({self.name!r}, ..., lease=...)"
        )

    def _encode(self, handle: str, value: Any) -> bytes:
        if not isinstance(value, self.model):
            raise StateError(
                f"{self.name} {handle!r}: the value to save is a {type(value).__qualname__}, "
                f"not a {self.model.__qualname__}; nothing was saved.\n"
                f"  fix: assign a {self.model.__qualname__} to Held.value"
            )
        data = self._header + value.model_dump_json().encode()
        if len(data) > self.max_size:
            raise StateTooLarge(
                f"{self.name} {handle!r}: the new value takes {len(data):,} bytes, over the "
                f"limit of {self.max_size:,}; nothing was saved.\n"
                f"  fix: keep less in a {self.name}, or raise State({self.name!r}, ..., "
                "max_size=...)"
            )
        return data

    def _decode(self, key: StateKey, data: bytes) -> M:
        header, _, payload = data.partition(b"\n")
        try:
            version = int(header)
        except ValueError:
            version = -1
        if version > self.version:  # a newer worker wrote it: never migrate it backwards
            raise StateError(
                f"{self.name} {key.handle!r}: the stored value has schema version {version}, "
                f"newer than this server's version {self.version}; it was neither read nor "
                "changed.\n"
                f"  fix: finish deploying the server with State({self.name!r}, ..., "
                f"version={version}) to every worker, and keep older workers out of rotation "
                "until then"
            )
        try:
            if version == self.version:
                return self.model.model_validate_json(payload)
            if version >= 1 and self.migrate is not None:
                import json

                return self.model.model_validate(self.migrate(version, json.loads(payload)))
        except (ValidationError, ValueError) as exc:
            raise StateError(
                f"{self.name} {key.handle!r}: the stored value (schema version {version}) "
                f"does not validate as {self.model.__qualname__} (version {self.version}): "
                f"{_first_line(exc)}.\n"
                f"  fix: pass State({self.name!r}, ..., migrate=...) to turn old values "
                "into valid ones, or keep the model compatible"
            ) from exc
        raise StateError(
            f"{self.name} {key.handle!r}: the stored value has schema version {version}, "
            f"and this server reads version {self.version}.\n"
            f"  fix: pass State({self.name!r}, ..., migrate=...) to convert older versions"
        )


# -- retries that do not double ------------------------------------------------------------

IDEMPOTENCY_KEY = "idempotency_key"
_KEY_ARGUMENT = Annotated[
    str | None,
    Field(
        default=None,
        min_length=1,
        max_length=200,
        description=(
            "Optional. A new random string for each distinct request; send the same one "
            "again when you retry a request whose answer you did not get, and it is not "
            "applied twice."
        ),
    ),
]


def _idempotent(state: State[Any], fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    import typing

    from pydantic import TypeAdapter

    where = f"State({state.name!r}).idempotent({getattr(fn, '__qualname__', fn)!r})"
    hints = typing.get_type_hints(fn, include_extras=True)
    edits = [
        name
        for name, hint in hints.items()
        if typing.get_origin(hint) is Annotated
        and any(isinstance(m, Resolve) and m.fn is state.edit for m in hint.__metadata__)
    ]
    if not edits:
        raise ValueError(
            f"{where}: the function edits no {state.name}, so there is nothing to keep "
            "from doubling.\n"
            f"  fix: give it a parameter Annotated[Held[{state.model.__qualname__}], "
            "Resolve(state.edit)]"
        )
    signature = inspect.signature(fn)
    if IDEMPOTENCY_KEY in signature.parameters:
        raise ValueError(
            f"{where}: the function already has a parameter {IDEMPOTENCY_KEY!r}.\n"
            "  fix: rename it; the decorator adds that argument itself"
        )
    adapter: TypeAdapter[Any] = TypeAdapter(hints.get("return", Any))
    edit, tool = edits[0], fn.__name__

    async def idempotent(**kw: Any) -> Any:
        key = kw.pop(IDEMPOTENCY_KEY, None)
        ledger: Ledger = kw.pop(_LEDGER)
        if key is None:
            return await fn(**kw)
        held: Held[Any] = kw[edit]
        if type(key) is not str or not 1 <= len(key) <= 200:
            raise StateError(
                f"{tool}: {IDEMPOTENCY_KEY} must be a string of 1 to 200 characters, "
                f"not {type(key).__name__} {str(key)[:40]!r}.\n"
                "  fix: send a new random string (a UUID) per request, the same one on retry"
            )
        name = hashlib.blake2b(f"{tool}\n{key}".encode(), digest_size=16).hexdigest()
        entry = next(e for e in ledger.loaded.values() if e.held is held)
        assert entry.where is not None  # set by every edit
        store, at = entry.where
        earlier = await store.recall(at, name)
        if earlier is not None:
            entry.replayed = True  # the first call wrote it all: this one writes nothing
            return adapter.validate_json(earlier)
        result = await fn(**kw)
        entry.receipt = (name, adapter.dump_json(result))
        return result

    kw_only = inspect.Parameter.KEYWORD_ONLY
    params = [
        p.replace(kind=kw_only, annotation=hints.get(p.name, p.annotation))
        for p in signature.parameters.values()
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    params.append(
        inspect.Parameter(IDEMPOTENCY_KEY, kw_only, default=None, annotation=_KEY_ARGUMENT)
    )
    if _LEDGER in signature.parameters:
        raise ValueError(f"{where}: the parameter name {_LEDGER!r} is resolvent's own")
    params.append(
        inspect.Parameter(_LEDGER, kw_only, annotation=Annotated[Ledger, Resolve(call_ledger)])
    )
    returns = hints.get("return", signature.return_annotation)
    idempotent.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=returns
    )
    idempotent.__annotations__ = {
        **{p.name: p.annotation for p in params},
        "return": returns,
    }
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(idempotent, attribute, getattr(fn, attribute, None))
    return idempotent


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return " ".join(line.strip() for line in text[:3]) if text else type(exc).__name__
