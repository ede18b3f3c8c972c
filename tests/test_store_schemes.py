"""Stores by URL scheme: `open_store` opens a URL through the table of schemes, and
`add_store_scheme` adds a store of the user's own to it.

The conformance suite runs on a store added this way (``toy:``, see toy_store.py); here,
what a user sees when adding one goes wrong.
"""

import contextlib
import functools
from collections.abc import AsyncIterator
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from resolvent import (
    Container,
    Held,
    MemoryStore,
    Resolve,
    ResolventError,
    State,
    StateStore,
    add_store_scheme,
    open_store,
)
from snapshot import assert_snapshot
from toy_store import OPENED, ToyStore, toy_url


class Note(BaseModel):
    text: str = ""


async def test_a_state_naming_an_added_scheme_opens_that_store() -> None:
    url = toy_url()
    notes = State("note", Note, store=url)

    async def write(note: Annotated[Held[Note], Resolve(notes.new)]) -> str:
        note.value.text = "kept"
        return note.handle

    async def read(note: str, value: Annotated[Note, Resolve(notes.read)]) -> str:
        return value.text

    async with Container() as container:
        handle = await container.run(write)
        assert await container.run(read, note=handle) == "kept"
    assert OPENED.count(url) == 1  # one store per URL, the container's APP resource


async def test_an_unknown_scheme_names_the_url_the_schemes_and_the_fix() -> None:
    with pytest.raises(ResolventError) as caught:
        async with open_store("Nosuch://user:s3cret@db.internal/state"):
            pass
    message = str(caught.value)
    assert "s3cret" not in message
    assert_snapshot("open_store_unknown_scheme", message)


def test_a_scheme_is_added_once() -> None:
    @contextlib.asynccontextmanager
    async def other(url: str) -> AsyncIterator[StateStore]:
        yield MemoryStore()

    with pytest.raises(ValueError) as caught:
        add_store_scheme("TOY", other)
    assert_snapshot("add_store_scheme_twice", str(caught.value))
    with pytest.raises(ValueError, match="'sqlite' is built in"):
        add_store_scheme("sqlite", other)


def test_an_opener_without_a_name_of_its_own_is_named_by_its_repr() -> None:
    # A partial (an opener given its options) has no __qualname__: its repr says what it is.
    add_store_scheme("toy-partial", functools.partial(ToyStore.connect))
    with pytest.raises(ValueError) as caught:
        add_store_scheme("toy-partial", ToyStore.connect)
    assert_snapshot("add_store_scheme_twice_partial", str(caught.value))


@pytest.mark.parametrize("scheme", ["", "toy:", "2kv", "k v", "kv/"])
def test_a_scheme_is_a_url_scheme(scheme: str) -> None:
    with pytest.raises(ValueError) as caught:
        add_store_scheme(scheme, ToyStore.connect)
    assert_snapshot("add_store_scheme_not_a_scheme", str(caught.value).replace(repr(scheme), "S"))


def test_an_opener_is_callable() -> None:
    with pytest.raises(TypeError) as caught:
        add_store_scheme("notcallable", "ToyStore.connect")  # type: ignore[arg-type]
    assert_snapshot("add_store_scheme_not_callable", str(caught.value))


def _plain(url: str) -> Any:
    return MemoryStore()  # the store itself, not a context manager that opens it


@contextlib.asynccontextmanager
async def _not_a_store(url: str) -> AsyncIterator[Any]:
    yield object()


@pytest.mark.parametrize("scheme", ["broken-cm", "broken-store"])
async def test_an_opener_that_yields_no_store_is_named(scheme: str) -> None:
    add_store_scheme(  # gone after the test (conftest.py)
        scheme, _plain if scheme == "broken-cm" else _not_a_store
    )
    with pytest.raises(TypeError) as caught:
        async with open_store(f"{scheme}://x"):
            pass
    assert_snapshot(f"open_store_{scheme.replace('-', '_')}", str(caught.value))
