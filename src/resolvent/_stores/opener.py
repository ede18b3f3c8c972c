"""Opening a state store by URL: a table from a URL's scheme to the function that opens a
store for it. ``memory:``, ``sqlite:`` and ``redis:`` (with ``rediss:``, ``valkey:`` and
``valkeys:``) are built in; `add_store_scheme` adds one. A store's module, and its client
library, are imported only when a URL names it.
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager
from typing import cast

from .._vocabulary.errors import ResolventError
from . import StateStore, redact

__all__ = ("add_store_scheme", "open_store")

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")


@contextlib.asynccontextmanager
async def _memory(url: str) -> AsyncGenerator[StateStore]:
    from .memory import MemoryStore

    async with contextlib.aclosing(MemoryStore()) as store:
        yield store


@contextlib.asynccontextmanager
async def _sqlite(url: str) -> AsyncGenerator[StateStore]:
    rest = url.partition(":")[2]
    if not rest.startswith("///") or len(rest) == 3:
        raise ResolventError(
            f"cannot open {url!r}: a SQLite URL has three slashes before a relative path "
            "and four before an absolute one.\n"
            "  fix: sqlite:///state.db or sqlite:////var/lib/app/state.db"
        )
    from .sqlite import SqliteStore

    # Percent-decoded, as a URL is: pydantic's AnyUrl writes "my cart.db" "my%20cart.db".
    path = urllib.parse.unquote(rest[3:])
    async with contextlib.aclosing(await SqliteStore.open(path)) as store:
        yield store


@contextlib.asynccontextmanager
async def _redis(url: str) -> AsyncGenerator[StateStore]:
    try:
        from .redis import RedisStore
    except ImportError as exc:
        raise ResolventError(
            f"cannot open a Redis state store: the Redis store needs coredis ({exc}).\n"
            '  fix: pip install "resolvent[redis]"'
        ) from exc
    async with RedisStore.connect(url) as store:
        yield store


_SCHEMES: dict[str, Callable[[str], AbstractAsyncContextManager[StateStore]]] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "redis": _redis,
    "rediss": _redis,
    "valkey": _redis,
    "valkeys": _redis,
}
_BUILT_IN = frozenset(_SCHEMES)


@contextlib.asynccontextmanager
async def open_store(url: str = "memory:") -> AsyncGenerator[StateStore]:
    """Open the store a URL names, and close it on exit.

    - ``memory:`` — `MemoryStore`, this process only;
    - ``sqlite:///relative/path.db`` (from the current directory) or
      ``sqlite:////absolute/path.db`` — `SqliteStore`, shared by the processes of one
      host; the path is percent-decoded (``my%20cart.db`` is ``my cart.db``);
    - ``redis://HOST:PORT[/DB]`` (or ``rediss://``, ``valkey://``) —
      ``resolvent.redis.RedisStore``, shared by many hosts; needs
      ``pip install "resolvent[redis]"``;
    - a scheme added with `add_store_scheme` — the store its opener yields.

    ```python
    @container.provider(scope=Scope.APP)
    async def store() -> AsyncIterator[StateStore]:
        async with open_store("sqlite:///state.db") as opened:
            yield opened
    ```

    Raises:
        ResolventError: the URL names no known store, or the store cannot be reached
            (the message names the URL, without its password, and the cause).
        TypeError: the opener added for the URL's scheme yields no `StateStore`.
    """
    scheme = url.partition(":")[0].lower()
    opener = _SCHEMES.get(scheme)
    if opener is None:
        known = ", ".join(sorted(_SCHEMES))
        raise ResolventError(
            f"cannot open the state store {redact(url)!r}: unknown scheme {scheme!r} "
            f"(the known ones: {known}).\n"
            "  fix: use memory:, sqlite:///PATH or redis://HOST:PORT[/DB], or add a store "
            f"for the scheme first: resolvent.add_store_scheme({scheme!r}, YourStore.connect)"
        )
    opening = cast(object, opener(url))  # checked: an opener a user added may be wrong
    if not isinstance(opening, AbstractAsyncContextManager):
        raise TypeError(
            f"open_store({redact(url)!r}): the opener added for {scheme!r}, "
            f"{_name(opener)}, returned {type(opening).__qualname__}, not an async context "
            "manager.\n  fix: make it a @contextlib.asynccontextmanager function (or "
            "classmethod) that yields the open store and closes it after the yield"
        )
    async with cast("AbstractAsyncContextManager[object]", opening) as store:
        if not isinstance(store, StateStore):
            raise TypeError(
                f"open_store({redact(url)!r}): the opener added for {scheme!r}, "
                f"{_name(opener)}, yielded {type(store).__qualname__}, which is not a "
                "StateStore (it lacks one of create, load, renew, save, recall, aclose).\n"
                "  fix: yield an object with every method of resolvent.StateStore"
            )
        yield store


def add_store_scheme(
    scheme: str, opener: Callable[[str], AbstractAsyncContextManager[StateStore]]
) -> None:
    """Let `open_store`, and so ``State(..., store="SCHEME:...")``, open a store of your own.

    *opener(url)* receives the whole URL and returns an async context manager that yields
    the open store (a `StateStore`) and closes it on exit: a function decorated with
    `contextlib.asynccontextmanager`, or a classmethod such as ``RedisStore.connect``.

    ```python
    class KvStore(MemoryStore):  # a real one talks to its own database
        @classmethod
        @contextlib.asynccontextmanager
        async def connect(cls, url: str) -> AsyncIterator[KvStore]:
            store = cls()
            try:
                yield store
            finally:
                await store.aclose()

    add_store_scheme("kv", KvStore.connect)
    carts = State("cart", Cart, store="kv://carts")
    ```

    Args:
        scheme: the URL scheme, without its colon: a letter, then letters, digits, ``+``,
            ``-`` or ``.``; case does not matter.
        opener: opens the store a URL of *scheme* names.

    Raises:
        ValueError: *scheme* is not a URL scheme, or already opens stores (one opener per
            scheme; the built-in ones are taken).
        TypeError: *opener* is not callable.
    """
    where = f"add_store_scheme({scheme!r}, ...)"
    if not _SCHEME.fullmatch(str(scheme).lower()):
        raise ValueError(
            f"{where}: scheme must be a URL scheme without its colon: a letter, then "
            "letters, digits, '+', '-' or '.'.\n"
            "  fix: add_store_scheme('kv', KvStore.connect) for URLs like kv://..."
        )
    if not callable(opener):
        raise TypeError(
            f"{where}: opener must be callable, not {type(opener).__qualname__}.\n"
            "  fix: pass a function that takes the URL and returns an async context "
            "manager yielding the open store (see RedisStore.connect)"
        )
    scheme = scheme.lower()
    taken = _SCHEMES.get(scheme)
    if taken is not None:
        whose = "built in" if scheme in _BUILT_IN else f"already added, opened by {_name(taken)}"
        raise ValueError(
            f"{where}: the scheme {scheme!r} is {whose}; a scheme has one opener.\n"
            "  fix: add a scheme once (when the module that defines its store is imported), "
            "and give your store a scheme of its own"
        )
    _SCHEMES[scheme] = opener


def _name(opener: object) -> str:
    """*opener* as messages name it: ``module.qualname``, else its repr (a
    ``functools.partial`` has no name of its own, and its repr says what it wraps)."""
    name = getattr(opener, "__qualname__", None)
    if not name:
        return repr(opener)
    module = getattr(opener, "__module__", None)
    return f"{module}.{name}" if module else name
