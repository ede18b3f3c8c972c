"""The notes server's providers without MCP: the container is framework-agnostic.

The same `database` (APP), `writer` (SESSION) and `transaction` (CALL) providers that serve
the MCP tools in ``examples/notes_server`` serve plain functions here, and the deletion
question is answered on the terminal instead of by an MCP client.

Run it with ``python examples/notes_cli.py "buy milk" "call mum"``; add ``--yes`` to answer
the question without a prompt.
"""

import sqlite3
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated

import anyio
from notes_server.providers import (
    Confirm,
    add_note,
    database,
    in_memory,
    list_notes,
    transaction,
    writer,
)
from pydantic import BaseModel

from resolvent import (
    Accepted,
    Cancelled,
    Container,
    Declined,
    Elicit,
    ElicitationResult,
    Resolve,
    Scope,
)

Asker = Callable[[str, type[BaseModel]], Awaitable[ElicitationResult[BaseModel]]]

container = Container()
container.provide(in_memory, scope=Scope.APP, inline=True)
container.provide(database, scope=Scope.APP, inline=True)
container.provide(writer, scope=Scope.SESSION, inline=True)
container.provide(transaction, inline=True)


async def confirm_delete(note_id: int) -> Elicit[Confirm]:
    return Elicit(f"Delete note {note_id}?", Confirm)


async def delete(
    note_id: int,
    answer: Annotated[ElicitationResult[Confirm], Resolve(confirm_delete)],
    tx: Annotated[sqlite3.Connection, Resolve(transaction)],
) -> str:
    if not isinstance(answer, Accepted) or not answer.data.confirm:
        return f"kept note {note_id}"
    tx.execute("delete from notes where id = ?", (note_id,))
    return f"deleted note {note_id}"


def terminal_asker(assume_yes: bool) -> Asker:
    """An asker for `Elicit` questions: a y/n prompt on the terminal."""

    async def ask(message: str, schema: type[BaseModel]) -> ElicitationResult[BaseModel]:
        if assume_yes:
            print(f"{message} [y/n] y (--yes)")
            return Accepted(data=schema.model_validate({"confirm": True}))
        try:
            reply = await anyio.to_thread.run_sync(input, f"{message} [y/n] ")
        except EOFError:
            return Cancelled()
        if reply.strip().lower() in ("y", "yes"):
            return Accepted(data=schema.model_validate({"confirm": True}))
        return Declined()

    return ask


async def main(texts: list[str], assume_yes: bool) -> None:
    async with container, container.session() as session:
        for text in texts or ["buy milk", "call mum"]:
            note = await session.run(add_note, text=text)
            print(f"added note {note.id} {note.text!r} by {note.author}")
        async with session.call(asker=terminal_asker(assume_yes)) as call:
            print(await call.run(delete, note_id=1))
        for note in await session.run(list_notes):
            print(f"  {note.id}. {note.text} ({note.author})")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    yes = "--yes" in arguments
    anyio.run(main, [a for a in arguments if a != "--yes"], yes)
