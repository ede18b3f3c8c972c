"""resolvent in one screen: scopes, a resource with teardown, and questions for the user.

Run it with ``python examples/core_demo.py``. It books a table twice: once where the
user confirms and declines the newsletter, once where the user declines the booking
itself. Questions are answered by a scripted asker, so the demo needs no terminal input
and finishes at once. (``python3 dev.py demo`` runs the MCP demo, ``examples/demo.py``.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

import anyio
from pydantic import BaseModel

from resolvent import (
    Accepted,
    Cancelled,
    Container,
    Declined,
    Elicit,
    ElicitationResult,
    NotAccepted,
    Resolve,
    Scope,
)

container = Container()


def say(who: str, text: str) -> None:
    print(f"  {who:<9} {text}")


# -- APP scope: created once, on first use; closed when the container closes ---------------


@dataclass
class Settings:
    restaurant: str = "Trattoria Resolvente"
    tables: int = 12


@container.provider(scope=Scope.APP)
def settings() -> Settings:
    return Settings()


@dataclass
class Bookings:
    """Stands in for a database connection pool."""

    rows: list[str] = field(default_factory=list[str])


@container.provider(scope=Scope.APP)
async def bookings(s: Annotated[Settings, Resolve(settings)]) -> AsyncIterator[Bookings]:
    say("app", f"open the booking book of {s.restaurant}")
    book = Bookings()
    yield book
    say("app", f"close the booking book ({len(book.rows)} booking(s))")


# -- CALL scope: once per call, torn down in reverse order at the end of the call -----------


@dataclass
class Transaction:
    pending: list[str] = field(default_factory=list[str])


async def transaction(db: Annotated[Bookings, Resolve(bookings)]) -> AsyncIterator[Transaction]:
    say("call", "begin transaction")
    tx = Transaction()
    try:
        yield tx
    except Exception as exc:
        # The call's exception is thrown in here at the yield.
        say("call", f"roll back ({type(exc).__name__})")
        raise
    db.rows.extend(tx.pending)
    say("call", f"commit {tx.pending}")


class Confirm(BaseModel):
    confirm: bool
    name: str


async def confirmation(guests: int, s: Annotated[Settings, Resolve(settings)]) -> Elicit[Confirm]:
    return Elicit(f"Book a table for {guests} at {s.restaurant}? Under which name?", Confirm)


class Newsletter(BaseModel):
    subscribe: bool


async def newsletter() -> Elicit[Newsletter]:
    return Elicit("Would you like our newsletter?", Newsletter)


async def book_table(
    guests: int,
    answer: Annotated[Confirm, Resolve(confirmation)],
    news: Annotated[ElicitationResult[Newsletter], Resolve(newsletter)],
    tx: Annotated[Transaction, Resolve(transaction)],
) -> str:
    tx.pending.append(f"{answer.name} x{guests}")
    match news:
        case Accepted(data=Newsletter(subscribe=True)):
            extra = "subscribed to the newsletter"
        case Accepted() | Declined():
            extra = "no newsletter"
        case Cancelled():
            extra = "newsletter question dismissed"
    return f"table for {guests} booked for {answer.name}; {extra}"


def scripted_asker(
    script: dict[type[BaseModel], ElicitationResult[BaseModel]],
) -> Callable[[str, type[BaseModel]], Awaitable[ElicitationResult[BaseModel]]]:
    """An asker that answers from a script instead of a terminal or an MCP client."""

    async def ask(message: str, schema: type[BaseModel]) -> ElicitationResult[BaseModel]:
        say("asks", message)
        outcome = script[schema]
        say(
            "user", outcome.action + (f" {outcome.data!r}" if isinstance(outcome, Accepted) else "")
        )
        return outcome

    return ask


async def main() -> None:
    print("== plan")
    print(container.compile(book_table).describe())

    async with container:
        print("\n== call 1: the user confirms and declines the newsletter")
        yes = scripted_asker(
            {Confirm: Accepted(data=Confirm(confirm=True, name="Ada")), Newsletter: Declined()}
        )
        async with container.call(asker=yes) as call:
            say("result", await call.run(book_table, guests=2))

        print("\n== call 2: the user declines the booking")
        no = scripted_asker({Confirm: Declined(), Newsletter: Declined()})
        try:
            async with container.call(asker=no) as call:
                await call.run(book_table, guests=4)
        except NotAccepted as exc:
            say("result", f"NotAccepted: {exc}")

        print("\n== closing the container")
    print("done")


if __name__ == "__main__":
    anyio.run(main)
