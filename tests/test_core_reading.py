"""Reading a plain function skips `inspect.signature` and `typing.get_type_hints`: what it
reads must be what they say, for every shape of parameter list and annotation."""

import functools
import inspect
import typing
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resolvent import InvalidSignature, Resolve
from resolvent._reading.annotations import strict_hints
from resolvent._reading.signature import _parameters


async def dep() -> int:
    return 1


def _shapes() -> list[Any]:
    def every(a, b=1, /, c=2, *args, d, e=3, **kw): ...
    def only_positional(a, /): ...
    def defaults_only(a=1, b=None): ...
    def keyword_only(*, a, b=2): ...
    def star(*args): ...
    def star_star(**kw): ...
    def both_stars(*args, **kw): ...
    def none(): ...

    def with_locals(a: int, *, b: str = "x") -> None:
        c = a  # locals come after the parameters in the code object
        del c

    async def injected(
        user_id: str, d: Annotated[int, Resolve(dep)], *, e: int | None = None
    ) -> int:
        return d

    return [
        every, only_positional, defaults_only, keyword_only, star, star_star, both_stars,
        none, with_locals, injected, lambda a, *b, c=1: None,
    ]  # fmt: skip


@pytest.mark.parametrize("fn", _shapes(), ids=lambda fn: fn.__name__)
def test_parameters_read_from_the_code_are_what_inspect_reads(fn: Any) -> None:
    expected = [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]
    assert _parameters(fn, "fn") == expected


def test_a_wrapped_or_re_signed_function_is_read_through_inspect() -> None:
    def inner(a: int, b: str) -> None: ...

    @functools.wraps(inner)
    def outer(*args: Any, **kwargs: Any) -> None: ...

    def signed(*args: Any) -> None: ...

    signed.__signature__ = inspect.Signature(
        [inspect.Parameter("x", inspect.Parameter.KEYWORD_ONLY)]
    )
    assert [p[0] for p in _parameters(outer, "outer")] == ["a", "b"]
    assert _parameters(signed, "signed") == [("x", inspect.Parameter.KEYWORD_ONLY, inspect._empty)]


class Model:
    pass


def _annotated() -> list[Any]:
    def classes(a: int, b: Model, c: Any) -> str: ...
    def markers(a: Annotated[int, Resolve(dep)], b: Annotated[Model, "x", 1]) -> None: ...
    def generic(a: list[int], b: Annotated[list[int], Resolve(dep)]) -> dict[str, int]: ...
    def optional(a: int | None, b: typing.Optional[int]) -> None: ...  # noqa: UP045
    def returns_none(a: int) -> None: ...
    def strings(a: "int", b: "Annotated[Model, 'x']") -> "Model": ...
    def unannotated(a, b=1): ...

    return [classes, markers, generic, optional, returns_none, strings, unannotated]


@pytest.mark.parametrize("fn", _annotated(), ids=lambda fn: fn.__name__)
def test_annotations_read_as_they_are_are_what_typing_reads(fn: Any) -> None:
    assert strict_hints(fn) == typing.get_type_hints(fn, include_extras=True)


def _ordinary() -> list[Any]:
    async def handler(user_id: str, d: Annotated[int, Resolve(dep)], *, e: Model) -> int: ...
    def by_type(d: Annotated[Model, Resolve()], **kw: Any) -> None: ...
    def unannotated(a, b): ...
    def two_notes(d: Annotated[int, Resolve(dep), "note"]) -> None: ...
    def defaulted(d: Annotated[int, Resolve(dep)] = 1) -> None: ...
    def generic(a: list[int]) -> None: ...

    return [handler, by_type, unannotated, two_notes, defaulted, generic]


@pytest.mark.parametrize("fn", _ordinary(), ids=lambda fn: fn.__name__)
def test_parameters_read_in_one_pass_are_what_the_full_reading_gives(fn: Any) -> None:
    """A plain function's ordinary parameters are read in one pass; the others (None
    there) by the reading that checks each parameter."""
    from resolvent._reading.params import plain_params, plain_reading
    from resolvent._reading.signature import _read_params

    def read(params: Any) -> list[Any]:  # a marker is its resolver
        return [(p.name, p.bare, p.marker and p.marker.fn, p.default, p.outcome) for p in params]

    hints = strict_hints(fn)
    fast = plain_params(fn, hints)
    assert fast is None or read(fast) == read(_read_params(fn, fn.__name__, hints, {}))
    assert (fast is None) == (fn.__name__ in ("two_notes", "defaulted", "generic"))
    # Annotations and parameters at once: only where both would be read in one pass,
    # and none but those of its parameters and return (not a **kwargs's, say).
    both = plain_reading(fn)
    assert both is None or (both[0] is fn.__annotations__ and read(both[1]) == read(fast or []))
    assert (both is None) == (fn.__name__ in ("by_type", "two_notes", "defaulted", "generic"))


def test_a_class_registered_as_a_marker_later_is_refused_where_written_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A parameter annotated with a class is one shared reading, until that class is
    registered as a marker: written alone it is then a mistake the reading names."""
    from resolvent._reading.params import RESOLVE_MARKERS, plain_reading, register_resolve_marker
    from resolvent._reading.signature import read_function

    class Mark:
        def __init__(self, fn: Any) -> None:
            self.fn = fn

    def before(x: Mark) -> int: ...
    def after(x: Mark) -> int: ...

    assert plain_reading(before) is not None and read_function(before).params[0].bare is Mark
    monkeypatch.setitem(RESOLVE_MARKERS, Mark, lambda m: Resolve(m.fn))
    del RESOLVE_MARKERS[Mark]  # registered the public way, undone at the end
    register_resolve_marker(Mark, lambda m: Resolve(m.fn))
    assert plain_reading(after) is None
    with pytest.raises(InvalidSignature, match="annotated with the marker itself"):
        read_function(after)


def test_a_marker_written_on_keyword_arguments_is_refused() -> None:
    """The one-pass reading reads a function's parameters, not its ``**kwargs``: one whose
    ``**kwargs`` carries a marker class is read by the reading that names the mistake."""
    from resolvent._reading.signature import read_function

    def extra(d: Annotated[int, Resolve(dep)], **kw: Resolve) -> int: ...

    with pytest.raises(InvalidSignature, match=r"parameter 'kw' .* the marker itself"):
        read_function(extra)


def test_a_class_registered_as_a_context_manager_is_read_again() -> None:
    """What an ``async def`` returning a class provides is remembered per class, until an
    ABC registers a class: a later one returning it is then read as a resource."""
    import contextlib

    from resolvent._reading.kinds import Kind
    from resolvent._reading.signature import read_function

    class Conn:
        pass

    async def first() -> Conn: ...
    async def later() -> Conn: ...

    assert read_function(first).kind is Kind.ASYNC
    contextlib.AbstractAsyncContextManager.register(Conn)
    info = read_function(later)
    assert (info.kind, info.provides) == (Kind.ASYNC_CONTEXT_MANAGER, Conn)


# What comes before a parameter, if anything (mostly nothing: most functions are plain).
_KINDS = ("", "", "", "/", "/", "*", "*args", "**kw")
_NOTES = (
    "",
    ": int",
    ": Annotated[int, Resolve(dep)]",
    ": Model",
    ": Any",
    ": list[int]",
    ": Resolve",
    ": Annotated[int, Resolve(dep)]",
    ": Annotated[Model, Resolve()]",
    ": Annotated[list[int], Resolve(dep)]",
    ": Annotated[int, Resolve(dep), 'note']",
    ": Annotated[int, Resolve]",
    ": Annotated[int, Resolve(3)]",
    ": Annotated[int | None, Resolve(dep)]",
    ": int | Annotated[int, Resolve(dep)]",
)
_RETURNS = ("", " -> int", " -> Model", " -> Any", " -> None", " -> Resolve", " -> list[int]")


@st.composite
def _functions(draw: st.DrawFn) -> str:
    """The source of a function: a few parameters, each maybe after ``/``, ``*``, as
    ``*args`` or ``**kw``, annotated or not, with a default or not (Python's rules kept)."""
    parts: list[str] = []
    names = draw(st.integers(0, 4))
    star = slash = False
    defaulted = False
    for i in range(names):
        kind = draw(st.sampled_from(_KINDS))
        note = draw(st.sampled_from(_NOTES))
        if kind == "/" and not slash and not star and parts:
            parts.append("/")
            slash = True
        elif kind == "*" and not star:
            parts.append("*")
            star = True
        elif kind == "*args" and not star:
            parts.append(f"*args{note if 'Annotated' not in note else ''}")
            star = True
            continue
        elif kind == "**kw":
            parts.append(f"**kw{note if 'Annotated' not in note else ''}")
            break
        default = draw(st.integers(0, 4)) == 0
        if defaulted and not star:
            default = True  # a positional parameter after one with a default has one
        defaulted = defaulted or default
        parts.append(f"p{i}{note}" + (" = 1" if default else ""))
    head = draw(st.sampled_from(("def", "async def")))
    return f"{head} f({', '.join(parts)}){draw(st.sampled_from(_RETURNS))}: ...\n"


def _outcome(source: str) -> tuple[Any, ...]:
    """What reading the function *source* defines gives: its reading's fields (a marker
    is its resolver), or the error said."""
    from resolvent._reading.signature import read_function

    ns: dict[str, Any] = {
        "Annotated": Annotated, "Any": Any, "Model": Model, "Resolve": Resolve, "dep": dep
    }  # fmt: skip
    exec(compile(source, "<f>", "exec"), ns)
    try:
        info = read_function(ns["f"])
    except InvalidSignature as exc:
        return ("error", str(exc))
    params = [(p.name, p.bare, p.marker and p.marker.fn, p.default, p.outcome) for p in info.params]
    return (params, info.kind, info.provides, info.may_ask, info.awaits, info.asks)


@settings(max_examples=500, deadline=None)
@given(source=_functions())
def test_a_function_read_in_one_pass_reads_as_the_full_reading_reads_it(source: str) -> None:
    """Whatever a function's parameters and annotations, the one-pass readings give what
    the reading that checks each parameter gives, or leave it to that reading."""
    from resolvent._reading import signature

    fast = _outcome(source)
    with pytest.MonkeyPatch.context() as patch:
        for name in ("plain_reading", "plain_annotations"):
            patch.setattr(signature, name, lambda fn: None)
        patch.setattr(signature, "plain_params", lambda fn, hints: None)
        full = _outcome(source)
    assert fast == full
