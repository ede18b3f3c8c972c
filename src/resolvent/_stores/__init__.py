"""Stores for state kept across calls: the protocol every store follows (the URL opener is
in `opener`). It imports none of the stores, so each store may import it.

A store keeps opaque values (bytes) under a `StateKey` with two clocks: a sliding idle
time-to-live that every load and save refreshes, and an absolute deadline fixed at
creation. An edit holds a *lease* on the key: one token at a time may change it, and the
save that ends the edit succeeds only while the lease is still its own. Leases are short,
and their holder renews them while it lives, so a dead holder's lease lapses by itself
within seconds; while a lease stands, the value does not expire as idle. Everything else
(handles, principals, models, schema versions, size limits) is `resolvent.State`'s job.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

__all__ = ("StateKey", "StateStore", "redact")


class StateKey(NamedTuple):
    """Where one value lives: its kind, its owner and its handle.

    Attributes:
        kind: the `State`'s name (``"cart"``).
        owner: a digest of the principal that created it; never the principal in clear.
        handle: the URL-safe random handle the server minted.
    """

    kind: str
    owner: str
    handle: str


@runtime_checkable
class StateStore(Protocol):
    """What `resolvent.State` needs from a store; implement it to add your own.

    Every method is atomic against every other call on the same key, from any task or
    process. Times are seconds. A value whose idle time or absolute deadline has passed
    does not exist: methods treat it as missing, and the store removes it (soon after it
    expires, not only when it is next asked for).

    `MemoryStore`, `SqliteStore` and ``resolvent.redis.RedisStore`` implement it; one
    conformance suite (``tests/test_state_conformance.py``) runs against each.
    """

    async def create(self, key: StateKey, data: bytes, idle: float, lifetime: float) -> None:
        """Store a new value under *key*, alive for *idle* seconds since its last use and
        at most *lifetime* seconds in all. *key* is fresh (a new random handle)."""
        ...

    async def load(self, key: StateKey, idle: float, token: str, lease: float) -> bytes | None:
        """The value under *key*, or None when there is none (or it expired).

        Refreshes its idle time. With *lease* > 0, also take the lease for *token* for
        *lease* seconds. A lease held by another token that has not run out makes it
        raise `resolvent.StateConflict` instead (whether or not this call leases); a
        lease held by *token* itself is no obstacle. The value lives at least as long as
        the lease (its absolute deadline permitting), however short its idle time.

        A store whose requests can reach it after their caller gave up (over a network,
        or after waiting for another process's lock) takes no lease for such a request:
        the caller is gone, and nobody would hold or release it.
        """
        ...

    async def renew(self, key: StateKey, token: str, lease: float) -> bool:
        """Extend *token*'s lease on *key* to *lease* seconds from now (and the value's
        life with it, its absolute deadline permitting): a compare-and-set on the token.

        Returns False, changing nothing, when the lease is no longer *token*'s or the
        value is gone; the holder then commits nothing.
        """
        ...

    async def save(
        self,
        key: StateKey,
        idle: float,
        token: str,
        data: bytes | None,
        delete: bool,
        remember: tuple[str, bytes, float] | None = None,
    ) -> bool:
        """End *token*'s lease on *key*: write *data* (None: keep the value), or remove
        the value when *delete* is true; refresh its idle time. With *remember*
        ``(name, result, ttl)``, also keep *result* under *name* for *key* for *ttl*
        seconds, in the same atomic step (see `recall`).

        Returns False, writing nothing, when the lease is no longer *token*'s (another
        token took it after it ran out) or the value is gone.
        """
        ...

    async def recall(self, key: StateKey, name: str) -> bytes | None:
        """The result a save kept under *name* for *key*, or None when there is none (or
        its time ran out). It outlives the value itself, if the save deleted it.

        A store may also offer ``load_recalling(key, idle, token, lease, name)``, which
        returns ``(load(...), recall(...))`` in one operation (the result None when the
        value is gone); `State` then spends one round trip, not two, on the first step
        of an edit with an idempotency key. The stores here all do.
        """
        ...

    async def aclose(self) -> None:
        """Release connections and background work; the store is not used after this."""
        ...


def redact(url: str) -> str:
    """A store's *url* without its password, for messages."""
    import urllib.parse  # only to say something about a URL

    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urllib.parse.urlunsplit(parts._replace(netloc=user + netloc))
