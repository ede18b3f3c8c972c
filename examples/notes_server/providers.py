"""The notes providers and the plain functions that use them, with no framework in sight:
the MCP server serves `add_note` and `list_notes` as tools, and the command-line example
(``examples/notes_cli.py``) calls them directly.

- APP: one embedded SQLite database (stdlib ``sqlite3``), opened lazily on first use, where
  the `Storage` provider says: in memory (`in_memory`), or a file so notes survive a restart.
- SESSION: a writer identity.
- CALL: a transaction, committed on success and rolled back on error.

Each scope logs its lifecycle at DEBUG level on `logger`.
"""

import itertools
import logging
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Storage:
    """Where the notes live: a SQLite file, or ``":memory:"`` for none."""

    path: str = ":memory:"


def in_memory() -> Storage:
    """The default `Storage`: notes last as long as the process."""
    return Storage()


# AUTOINCREMENT: an id is never given to a second note, even after the first is deleted,
# so a request naming a deleted note's id can never reach another note.
_SCHEMA = (
    "create table if not exists notes"
    " (id integer primary key autoincrement, text text not null, author text not null)"
)


def database(storage: Annotated[Storage, Resolve()]) -> Iterator[sqlite3.Connection]:
    """The embedded database: one connection for the server's lifetime.

    Writes are committed by `transaction` before a tool replies, so an acknowledged note
    survives a restart; several processes may share one file (SQLite locks it).
    """
    db = sqlite3.connect(storage.path, check_same_thread=False, timeout=10)
    db.execute(_SCHEMA)
    db.commit()
    where = "in memory" if storage.path == ":memory:" else storage.path
    _log("APP", f"database opened (sqlite, {where})")
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
