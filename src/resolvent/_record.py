"""Slotted record classes, built without compiling code at import time.

``@dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and
(frozen) ``__setattr__`` as source text and compiles it: about 1 ms a class, and the package
defines about a dozen at import. :func:`record` gives the subset they use, with shared
functions instead of generated ones; type checkers read it as a dataclass.

Each record has ``__slots__`` for its fields, an ``__init__`` taking them positionally or by
keyword (defaults and default factories last), a ``repr`` naming them, equality over the
fields that compare (and a matching hash when frozen) unless ``eq=False``, and, when frozen,
raises :class:`dataclasses.FrozenInstanceError` on assignment, as a frozen dataclass does.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar, dataclass_transform, overload

if TYPE_CHECKING:
    _T = TypeVar("_T", bound=type)
_MISSING: Any = object()


class _Field:
    __slots__ = ("compare", "default", "factory", "repr")

    def __init__(self, default: Any, factory: Any, repr: bool, compare: bool) -> None:
        self.default = default
        self.factory = factory
        self.repr = repr
        self.compare = compare


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] = _MISSING,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    """A field's options, as :func:`dataclasses.field` takes them."""
    return _Field(default, default_factory, repr, compare)


@overload
def record(cls: _T, /) -> _T: ...
@overload
def record(*, frozen: bool = True, eq: bool = True) -> Callable[[_T], _T]: ...
@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: Any = None, /, *, frozen: bool = True, eq: bool = True) -> Any:
    """Make *cls* a slotted record of its annotated fields (see the module docstring)."""
    if cls is None:

        def decorate(cls: type) -> type:
            return _build(cls, frozen=frozen, eq=eq)

        return decorate
    return _build(cls, frozen=frozen, eq=eq)


def _build(cls: type, *, frozen: bool, eq: bool) -> type:
    namespace = dict(cls.__dict__)
    names = tuple(namespace.get("__annotations__", {}))  # its own fields, not a base's
    namespace.pop("__dict__", None)
    namespace.pop("__weakref__", None)
    specs: list[tuple[str, Any, Any]] = []  # (name, default, factory)
    shown: list[str] = []
    compared: list[str] = []
    for name in names:
        value = namespace.pop(name, _MISSING)
        spec = value if isinstance(value, _Field) else _Field(value, _MISSING, True, True)
        required = spec.default is _MISSING and spec.factory is _MISSING
        if required and specs and not (specs[-1][1] is specs[-1][2] is _MISSING):
            raise TypeError(f"non-default field {name!r} follows a default one in {cls.__name__}")
        specs.append((name, spec.default, spec.factory))
        if spec.repr:
            shown.append(name)
        if spec.compare:
            compared.append(name)
    namespace["__qualname__"] = cls.__qualname__
    namespace["__slots__"] = names
    namespace["__match_args__"] = names
    owner: list[type] = []
    namespace["__init__"] = _init(tuple(specs), cls.__qualname__, owner)
    namespace["__repr__"] = _repr(tuple(shown))
    if eq:
        namespace["__eq__"] = _eq(tuple(compared))
        namespace["__hash__"] = _hash(tuple(compared)) if frozen else None
    if frozen:
        namespace["__setattr__"] = _frozen_setattr
        namespace["__delattr__"] = _frozen_delattr
        namespace["__getstate__"] = _getstate(names)
        namespace["__setstate__"] = _setstate(names)
    built = type(cls)(cls.__name__, cls.__bases__, namespace)
    owner.append(built)
    return built


_HOT_INITS = 256
"""Instances of one record class made through the shared ``__init__`` before the class
gets a compiled one: a class made often (a plan's steps, their inputs) stops paying for
the shared loop, and import compiles nothing."""


def _init(
    specs: tuple[tuple[str, Any, Any], ...], qualname: str, owner: list[type]
) -> Callable[..., None]:
    known = frozenset(name for name, _, _ in specs)
    put = object.__setattr__
    made = [0]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        made[0] += 1
        if made[0] == _HOT_INITS and owner and vars(owner[0]).get("__init__") is __init__:
            compiled = _compiled_init(specs, qualname, owner[0])
            if compiled is not None:
                type.__setattr__(owner[0], "__init__", compiled)
        if len(args) > len(specs):
            raise TypeError(
                f"{qualname}.__init__() takes {len(specs) + 1} positional arguments"
                f" but {len(args) + 1} were given"
            )
        for (name, _, _), value in zip(specs, args, strict=False):
            if name in kwargs:
                raise TypeError(f"{qualname}.__init__() got multiple values for argument {name!r}")
            put(self, name, value)
        for name, default, factory in specs[len(args) :]:
            if name in kwargs:
                value = kwargs[name]
            elif default is not _MISSING:
                value = default
            elif factory is not _MISSING:
                value = factory()
            else:
                raise TypeError(f"{qualname}.__init__() missing required argument: {name!r}")
            put(self, name, value)
        if not kwargs.keys() <= known:
            unknown = sorted(kwargs.keys() - known)[0]
            raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {unknown!r}")

    __init__.__qualname__ = f"{qualname}.__init__"
    return __init__


def _compiled_init(
    specs: tuple[tuple[str, Any, Any], ...], qualname: str, cls: type
) -> Callable[..., None] | None:
    """The same ``__init__`` compiled for these fields (None if a name does not allow it).

    Each field is set through its slot's own descriptor: what ``object.__setattr__``
    finds by name (a frozen record refuses ``self.name = ...``), without the look-up.
    """
    namespace: dict[str, Any] = {"__MISSING": _MISSING}
    params: list[str] = []
    body: list[str] = []
    for i, (name, default, factory) in enumerate(specs):
        if not name.isidentifier() or name == "self" or name.startswith("__"):
            return None
        if default is not _MISSING:
            namespace[f"__d{i}"] = default
            params.append(f"{name}=__d{i}")
        elif factory is not _MISSING:
            namespace[f"__f{i}"] = factory
            params.append(f"{name}=__MISSING")
            body.append(f"    if {name} is __MISSING: {name} = __f{i}()")
        else:
            params.append(name)
        namespace[f"__s{i}"] = vars(cls)[name].__set__
        body.append(f"    __s{i}(self, {name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body or ["    pass"])
    exec(compile(source, f"<record {qualname}>", "exec"), namespace)
    function: Callable[..., None] = namespace["__init__"]
    function.__qualname__ = f"{qualname}.__init__"
    return function


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__qualname__}({shown})"

    return __repr__


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of *names* on an instance, as a tuple (what a dataclass compares)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda self: (one(self),)
    return lambda self: ()


def _eq(names: tuple[str, ...]) -> Callable[[Any, object], bool]:
    values = _values(names)

    def __eq__(self: Any, other: object) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return values(self) == values(other)

    return __eq__


def _hash(names: tuple[str, ...]) -> Callable[[Any], int]:
    values = _values(names)

    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __hash__


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    from dataclasses import FrozenInstanceError  # only on a mistake

    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    values = _values(names)

    def __getstate__(self: Any) -> tuple[Any, ...]:
        return values(self)

    return __getstate__


def _setstate(names: tuple[str, ...]) -> Callable[[Any, tuple[Any, ...]], None]:
    def __setstate__(self: Any, state: tuple[Any, ...]) -> None:
        for name, value in zip(names, state, strict=True):
            object.__setattr__(self, name, value)

    return __setstate__
