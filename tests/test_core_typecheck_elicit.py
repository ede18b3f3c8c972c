"""A consumer of a resolver that may ask is checked against the question's schema.

`Annotated[T, Resolve(ask)]` with ``ask() -> Elicit[S]`` receives an `S` once the user
accepts, so a `T` that can never hold an `S` is refused at compile time, as is an outcome
consumer (``ElicitationResult[T]``, ``Accepted[T]``, the SDK's own types) whose `T`
cannot. The rules are those of plain resolvers: one related arm is enough, and anything
that cannot be judged (unannotated, ``Any``, a question whose answer type the core does
not know) passes. Messages are snapshot-tested.
"""

from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from resolvent import (
    Accepted,
    Container,
    Declined,
    Elicit,
    ElicitationResult,
    InvalidSignature,
    Resolve,
)
from snapshot import assert_snapshot


class Login(BaseModel):
    name: str


class Confirm(BaseModel):
    ok: bool


class Admin(Login):
    level: int = 1


async def ask_login() -> Elicit[Login]:
    return Elicit("Who are you?", Login)


async def known_or_ask() -> Login | Elicit[Login]:
    return Elicit("Who are you?", Login)


async def token_or_ask() -> str | Elicit[Login]:
    return "cached"


def user_name() -> str:
    return "ada"


def compile_error(fn: Any) -> str:
    with pytest.raises(InvalidSignature) as info:
        Container().compile(fn)
    message = str(info.value).replace(fn.__qualname__.rpartition(".")[0] + ".", "")
    return message.replace(f"{__name__}.", "")


def test_a_consumer_of_another_schema_is_refused_at_compile() -> None:
    async def deploy(confirm: Annotated[Confirm, Resolve(ask_login)]) -> bool:
        return confirm.ok  # would fail here, after the user answered

    assert_snapshot("elicit_type_mismatch", compile_error(deploy))


def test_an_outcome_consumer_is_judged_by_its_data_type() -> None:
    async def deploy(confirm: Annotated[ElicitationResult[Confirm], Resolve(known_or_ask)]) -> bool:
        return isinstance(confirm, Accepted) and confirm.data.ok

    assert_snapshot("elicit_outcome_type_mismatch", compile_error(deploy))


def test_a_member_type_consumer_keeps_its_own_form_in_the_fix() -> None:
    async def deploy(confirm: Annotated[Accepted[Confirm] | Declined, Resolve(ask_login)]) -> bool:
        return isinstance(confirm, Accepted) and confirm.data.ok

    message = compile_error(deploy)
    assert "expects Accepted[Confirm] | Declined (accepted data: Confirm)" in message
    assert "fix: annotate it `confirm: Annotated[Accepted[Login] | Declined, " in message


def test_an_outcome_consumer_of_a_plain_resolver_is_judged_too() -> None:
    # A resolver that never asks gives its value as Accepted(data=value).
    async def greet(name: Annotated[ElicitationResult[int], Resolve(user_name)]) -> str:
        return str(name)

    assert_snapshot("outcome_of_plain_type_mismatch", compile_error(greet))


def test_both_arms_are_named_when_neither_fits() -> None:
    async def handler(n: Annotated[int, Resolve(token_or_ask)]) -> int:
        return n

    message = compile_error(handler)
    assert "returns str when it does not ask and asks a question whose accepted answer" in message
    assert "fix: annotate it `n: Annotated[str | Login, Resolve(token_or_ask)]`" in message


def test_a_mismatch_deep_in_the_graph_names_the_path() -> None:
    async def audit(confirm: Annotated[Confirm, Resolve(ask_login)]) -> str:
        return "logged"

    async def handler(entry: Annotated[str, Resolve(audit)]) -> str:
        return entry

    message = compile_error(handler)
    assert "parameter 'confirm' of audit expects Confirm" in message
    assert "path: handler(entry=...) -> audit(confirm=...)" in message


async def _untyped():  # type: ignore[no-untyped-def]
    return Elicit("Who?", Login)


async def _asks_any() -> Any:
    return Elicit("Who?", Login)


async def _bare_question() -> Elicit:  # type: ignore[type-arg]
    return Elicit("Who?", Login)


COMPATIBLE: list[Any] = [
    pytest.param(Annotated[Login, Resolve(ask_login)], id="same-schema"),
    pytest.param(Annotated[Admin, Resolve(ask_login)], id="subclass"),
    pytest.param(Annotated[BaseModel, Resolve(ask_login)], id="base-class"),
    pytest.param(Annotated[Login | None, Resolve(ask_login)], id="optional"),
    pytest.param(Annotated[ElicitationResult[Login], Resolve(ask_login)], id="outcome"),
    pytest.param(Annotated[Accepted[Login], Resolve(known_or_ask)], id="member"),
    pytest.param(Annotated[ElicitationResult, Resolve(ask_login)], id="bare-alias"),  # type: ignore[type-arg]
    pytest.param(Annotated[Declined, Resolve(ask_login)], id="no-data-member"),
    pytest.param(Annotated[Login, Resolve(token_or_ask)], id="one-arm-fits"),
    pytest.param(Annotated[str | Login, Resolve(token_or_ask)], id="union-consumer"),
    pytest.param(Annotated[ElicitationResult[str], Resolve(user_name)], id="plain-outcome"),
    pytest.param(Annotated[Confirm, Resolve(_untyped)], id="unannotated"),
    pytest.param(Annotated[Confirm, Resolve(_asks_any)], id="any"),
    pytest.param(Annotated[Confirm, Resolve(_bare_question)], id="bare-elicit"),
    pytest.param(Annotated[Any, Resolve(ask_login)], id="any-consumer"),
]


@pytest.mark.parametrize("annotation", COMPATIBLE)
def test_compatible_or_unknown_consumers_compile(annotation: Any) -> None:
    async def handler(value: Any) -> None: ...

    handler.__annotations__["value"] = annotation
    Container().compile(handler)


def test_sdk_questions_and_outcomes_are_judged_the_same_way() -> None:
    pytest.importorskip("mcp", reason="compares with the SDK's questions: needs the mcp extra")
    from mcp.server.elicitation import AcceptedElicitation
    from mcp.server.mcpserver import Elicit as SdkElicit
    from mcp.server.mcpserver import ElicitationResult as SdkElicitationResult

    import resolvent.mcp  # noqa: F401  (teaches the core the SDK's questions)

    async def sdk_ask() -> SdkElicit[Login]:
        return SdkElicit("Who?", Login)

    async def good(
        a: Annotated[SdkElicitationResult[Login], Resolve(sdk_ask)],
        b: Annotated[Login, Resolve(sdk_ask)],
        c: Annotated[AcceptedElicitation[Login], Resolve(sdk_ask)],
    ) -> None: ...

    async def bad(c: Annotated[SdkElicitationResult[Confirm], Resolve(sdk_ask)]) -> None: ...

    Container().compile(good)
    message = compile_error(bad)
    assert "expects ElicitationResult[Confirm] (accepted data: Confirm)" in message
    assert "fix: annotate it `c: Annotated[ElicitationResult[Login], Resolve(sdk_ask)]`" in message


async def test_an_asking_consumer_of_the_right_schema_runs(anyio_backend: str) -> None:
    # The check refuses nothing that works: the right consumer receives the answer.
    async def asker(message: str, schema: type[BaseModel]) -> Accepted[Login]:
        return Accepted(data=Login(name="ada"))

    async def greet(login: Annotated[Login, Resolve(ask_login)]) -> str:
        return f"hi {login.name}"

    container = Container()
    async with container, container.call(asker=asker) as call:
        assert await call.run(greet) == "hi ada"
