"""The notes providers and the plain functions that use them, with no framework in sight:
the MCP server serves `add_note` and `list_notes` as tools, and the command-line example
(``examples/notes_cli.py``) calls them directly.

- APP: one embedded SQLite database (stdlib ``sqlite3``), opened lazily on first use.
- SESSION: a writer identity.
- CALL: a transaction, committed on success and rolled back on error.

Each scope logs its lifecycle at DEBUG level on `logger`.
"""

import itertools
import logging
import sqlite3
from collections.abc import Iterator
from typing import Annotated

from pydantic import BaseModel, Field

from resolvent import Resolve

logger = logging.getLogger("notes")
_writers = itertools.count(1)


def _log(scope: str, message: str) -> None:
    logger.debug(message, extra={"scope": scope})


class Note(BaseModel):
    """One stored note."""

    id: int
    text: str
    author: str


class Confirm(BaseModel):
    """The answer to a confirmation question."""

    confirm: bool = Field(description="Really do it?")


def database() -> Iterator[sqlite3.Connection]:
    """The embedded database: one connection for the server's lifetime."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute("create table notes (id integer primary key, text text, author text)")
    _log("APP", "database opened (sqlite, in memory)")
    try:
        yield db
    finally:
        db.close()
        _log("APP", "database closed")


def writer() -> Iterator[str]:
    """Who is writing: a fresh identity per MCP session."""
    name = f"writer-{next(_writers)}"
    _log("SESSION", f"{name} signed in")
    try:
        yield name
    finally:
        _log("SESSION", f"{name} signed out")


def transaction(
    db: Annotated[sqlite3.Connection, Resolve(database)],
) -> Iterator[sqlite3.Connection]:
    """One transaction per call: commit when the tool succeeds, roll back when it fails."""
    _log("CALL", "transaction begun")
    try:
        yield db
    except BaseException as exc:
        db.rollback()
        _log("CALL", f"transaction rolled back ({type(exc).__name__})")
        raise
    db.commit()
    _log("CALL", "transaction committed")


async def add_note(
    text: Annotated[str, Field(description="What to remember")],
    tx: Annotated[sqlite3.Connection, Resolve(transaction)],
    author: Annotated[str, Resolve(writer)],
) -> Note:
    """Store a note and return it."""
    cursor = tx.execute("insert into notes (text, author) values (?, ?)", (text, author))
    assert cursor.lastrowid is not None
    return Note(id=cursor.lastrowid, text=text, author=author)


async def list_notes(db: Annotated[sqlite3.Connection, Resolve(database)]) -> list[Note]:
    """Every stored note, oldest first."""
    rows = db.execute("select id, text, author from notes order by id").fetchall()
    return [Note(id=i, text=t, author=a) for i, t, a in rows]
