"""Records made often get a compiled ``__init__``: it takes and refuses what the shared one
does, and a frozen record stays frozen."""

import dataclasses

import pytest

from resolvent._record import field, record


@record
class Made:
    a: int
    b: list[int] = field(default_factory=list[int])
    c: str = "c"


@record(frozen=False)
class Open:
    a: int
    b: int = 2


def test_a_record_made_often_keeps_its_fields_defaults_and_freezing() -> None:
    made = [Made(i) for i in range(600)]  # well past the switch to the compiled __init__
    assert made[-1] == Made(599, [], "c")
    assert made[-1].b is not made[-2].b  # a fresh default per instance
    assert Made(1, c="x") == Made(a=1, b=[], c="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[-1].a = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing"):
        Made()  # type: ignore[call-arg]
    opened = [Open(i) for i in range(600)]
    opened[-1].b = 3
    assert (opened[-1].a, opened[-1].b, opened[-2].b) == (599, 3, 2)
