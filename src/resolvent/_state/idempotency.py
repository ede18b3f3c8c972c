"""Retries that do not double: `State.idempotent` gives a handler an optional
``idempotency_key``; a repeat of a committed call returns its first result and edits
nothing, the result being saved in the same atomic step as the edit.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from pydantic import Field

from .._integration import Resolve, StateError
from . import LEDGER as _LEDGER
from . import Held, Ledger, call_ledger
from .access import Access

__all__ = (
    "IDEMPOTENCY_KEY",
    "IDEMPOTENCY_META",
    "KEY_ARGUMENT",
    "idempotency_argument",
    "make_idempotent",
    "receipt_name",
)

R = TypeVar("R")

IDEMPOTENCY_KEY = "idempotency_key"
IDEMPOTENCY_META = "io.resolvent/idempotency-key"
"""The request ``_meta`` key an MCP client may send the idempotency key in, instead of the
argument (a prefix in reverse DNS notation, as MCP asks of ``_meta`` keys)."""
_KEYED = "__resolvent_idempotency_key__"  # on an `idempotent` handler: its key's argument


def idempotency_argument(fn: Callable[..., Any]) -> str | None:
    """The argument a `State.idempotent` handler takes its key in, or None for any other
    function; integrations fill it from where their requests carry the key."""
    found = getattr(fn, _KEYED, None)
    return found if isinstance(found, str) else None


KEY_ARGUMENT = Annotated[
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


def make_idempotent(
    state: Access[Any],
    edit_resolver: Callable[..., Any],
    keyed_edit: Callable[[str], Callable[..., Any]],
    fn: Callable[..., Awaitable[R]],
) -> Callable[..., Awaitable[R]]:
    """*fn* taking an optional idempotency key (see `State.idempotent`). Its parameter
    that resolves *edit_resolver* resolves ``keyed_edit(name of fn)`` instead: the same
    edit, which also takes the key and loads the result kept for it with the value."""
    import typing

    from pydantic import TypeAdapter

    where = f"State({state.name!r}).idempotent({getattr(fn, '__qualname__', fn)!r})"
    if not (inspect.isfunction(inspect.unwrap(fn)) or inspect.ismethod(fn)):
        raise TypeError(
            f"{where}: takes a function (`async def`), not {type(fn).__name__}: its name "
            "keys the results it keeps.\n"
            "  fix: decorate an async def that calls it, e.g. "
            "`async def add_item(...) -> Items: return await obj(...)`"
        )
    hints = typing.get_type_hints(fn, include_extras=True)
    edits = [
        name
        for name, hint in hints.items()
        if typing.get_origin(hint) is Annotated
        and any(isinstance(m, Resolve) and m.fn is edit_resolver for m in hint.__metadata__)
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
    dump = adapter.serializer.to_json  # adapter.dump_json, without its options to read
    edit, tool = edits[0], fn.__name__
    keyed = keyed_edit(tool)
    hint = hints[edit]
    hints[edit] = Annotated[
        (typing.get_args(hint)[0], *_swap(hint.__metadata__, edit_resolver, keyed))
    ]

    async def idempotent(**kw: Any) -> Any:
        key = kw.pop(IDEMPOTENCY_KEY, None)
        ledger: Ledger = kw.pop(_LEDGER)
        if key is None:
            return await fn(**kw)
        held: Held[Any] = kw[edit]
        for entry in ledger.loaded.values():  # the entry of the value this call edits
            if entry.held is held:
                break
        else:  # every edit enters its value in the call's ledger
            raise AssertionError(f"{where}: the edited value is not in the call's ledger")
        name = entry.name
        if name is not None:  # loaded for this request: what it kept came with the load
            earlier = entry.earlier
        else:  # another parameter of the call loaded the handle first
            name = receipt_name(tool, key)
            assert entry.where is not None  # set by every edit
            store, at = entry.where
            earlier = await store.recall(at, name)
        if earlier is not None:
            entry.replayed = True  # the first call wrote it all: this one writes nothing
            return adapter.validate_json(earlier)
        result = await fn(**kw)
        entry.receipt = (name, dump(result))
        return result

    kw_only = inspect.Parameter.KEYWORD_ONLY
    params = [
        p.replace(kind=kw_only, annotation=hints.get(p.name, p.annotation))
        for p in signature.parameters.values()
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    params.append(
        inspect.Parameter(IDEMPOTENCY_KEY, kw_only, default=None, annotation=KEY_ARGUMENT)
    )
    if _LEDGER in signature.parameters:
        raise ValueError(
            f"{where}: the parameter name {_LEDGER!r} is resolvent's own (it carries the "
            f"call's record of what it wrote)\n  fix: rename the parameter {_LEDGER!r}"
        )
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
    setattr(idempotent, _KEYED, IDEMPOTENCY_KEY)
    return idempotent


def receipt_name(tool: str, key: Any) -> str:
    """Where the result of *tool*'s call with idempotency *key* is kept; refuses a key
    that is not a string of 1 to 200 characters."""
    if type(key) is not str or not 1 <= len(key) <= 200:
        raise StateError(
            f"{tool}: {IDEMPOTENCY_KEY} must be a string of 1 to 200 characters, "
            f"not {type(key).__name__} {str(key)[:40]!r}.\n"
            "  fix: send a new random string (a UUID) per request, the same one on retry"
        )
    return hashlib.blake2b(f"{tool}\n{key}".encode(), digest_size=16).hexdigest()


def _swap(metadata: tuple[Any, ...], old: Any, new: Any) -> tuple[Any, ...]:
    """*metadata* with ``Resolve(old)`` in it made ``Resolve(new)``."""
    return tuple(Resolve(new) if isinstance(m, Resolve) and m.fn is old else m for m in metadata)
