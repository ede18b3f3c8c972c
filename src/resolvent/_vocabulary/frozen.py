"""`Frozen`: the base of the package's immutable records, written as plain classes.

A record lists its fields in ``__slots__`` and sets them in an ``__init__`` of its own with
`put` (``object.__setattr__``); once made it refuses assignment as a frozen dataclass does.
A record made once per compiled function (a plan, a reading) is made in its `making`
twin instead, by plain assignment: a `put` costs about ten of those.
Plain classes rather than ``@dataclass(frozen=True, slots=True)``: the package defines a
dozen records at import, and a dataclass compiles its methods from source text, which cost
a quarter of `import resolvent`'s instructions when measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import FrozenInstanceError
from operator import attrgetter
from typing import Any, ClassVar, TypeVar, cast

__all__ = ("Frozen", "making", "put")

put = object.__setattr__
"""Set a field of a record being made (or a cache a record keeps of its own)."""


R = TypeVar("R", bound="Frozen")


def making(cls: type[R]) -> type[R]:
    """A subclass of *cls* to make a record in, fast: its instances take plain assignment
    (a `put` costs about ten), and the maker turns each into a *cls*
    (``made.__class__ = cls``) before anyone else sees it. Both ``__setattr__`` and
    ``__delattr__`` are `object`'s: with either of `Frozen`'s, assignment goes through it."""
    fields = {"__setattr__": object.__setattr__, "__delattr__": object.__delattr__}
    made = type(cls.__name__, (cls,), {"__slots__": (), "__module__": cls.__module__, **fields})
    return cast("type[R]", made)


def _none(record: Any) -> tuple[()]:
    return ()


class Frozen:
    """Slotted fields, set once; ``repr`` names them; with ``compare=True`` in the class
    statement, equality and hash go by the fields' values (else by identity)."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _hidden: ClassVar[frozenset[str]] = frozenset()  # fields `repr` leaves out

    def __init_subclass__(cls, *, compare: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._fields = tuple(n for c in reversed(cls.__mro__) for n in vars(c).get("__slots__", ()))
        if compare:
            values: Callable[[Any], Any] = attrgetter(*cls._fields) if cls._fields else _none

            def __eq__(self: Any, other: object) -> Any:
                if other.__class__ is not self.__class__:
                    return NotImplemented
                return values(self) == values(other)

            cls.__eq__ = __eq__  # type: ignore[method-assign]
            cls.__hash__ = lambda self: hash(values(self))  # type: ignore[method-assign]

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __repr__(self) -> str:
        hidden = self._hidden
        shown = ", ".join(
            f"{name}={getattr(self, name)!r}" for name in self._fields if name not in hidden
        )
        return f"{type(self).__qualname__}({shown})"

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self._fields, state, strict=True):
            put(self, name, value)
