"""Annotations resolvent does not need never fail; a needed one that names something
missing at run time says which name, where, and how to fix it.

This module is written as many code bases are: postponed annotations, and names that
type checkers need imported only under ``TYPE_CHECKING``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import pytest

from modes import MODES, make_container, run
from resolvent import Container, InvalidSignature, Resolve, Scope

if TYPE_CHECKING:
    from decimal import Decimal
    from fractions import Fraction
    from mailbox import Message

    def only_for_checkers() -> str: ...


async def user_name(user_id: str = "u1") -> str:
    return f"user {user_id}"


async def handler(name: Annotated[str, Resolve(user_name)]) -> Decimal:
    """The root's return annotation: never needed by resolvent."""
    return name  # type: ignore[return-value]


async def typed_by_missing(name: Annotated[Fraction, Resolve(user_name)]) -> str:
    """A resolved parameter whose type is missing: its marker is still read."""
    return str(name)


async def takes_missing_argument(amount: Decimal, name: Annotated[str, Resolve(user_name)]) -> str:
    """A call argument whose type is missing: resolvent passes it as given."""
    return f"{name}: {amount}"


def total() -> Decimal:  # a resolver's return type is needed
    return 1  # type: ignore[return-value]


async def uses_total(t: Annotated[str, Resolve(total)]) -> str:
    return t


async def by_missing_type(m: Annotated[Message, Resolve()]) -> str:
    return str(m)


async def names_missing_resolver(v: Annotated[str, Resolve(only_for_checkers)]) -> str:
    return v


def lookup(amount: Decimal) -> str:  # a resolver parameter that is nothing resolvent knows
    return str(amount)


async def uses_lookup(v: Annotated[str, Resolve(lookup)]) -> str:
    return v


@pytest.mark.parametrize("mode", [*MODES, "call"])
async def test_unneeded_annotations_naming_missing_classes_do_not_stop_a_handler(
    mode: str,
) -> None:
    container = make_container(mode)

    async def go(fn: object, **kwargs: object) -> object:
        if mode == "call":
            async with container.call() as call:
                return await call.run(fn, **kwargs)  # type: ignore[arg-type]
        if kwargs:
            return await container.run(fn, **kwargs)  # type: ignore[arg-type]
        return await run(container, fn, mode)  # type: ignore[arg-type]

    assert await go(handler) == "user u1"
    assert await go(typed_by_missing) == "user u1"
    assert await go(takes_missing_argument, amount=3) == "user u1: 3"


def compile_error(fn: object) -> str:
    with pytest.raises(InvalidSignature) as info:
        Container().compile(fn)  # type: ignore[arg-type]
    return str(info.value)


def test_a_resolver_return_type_naming_a_missing_class_says_which_where_and_how() -> None:
    message = compile_error(uses_total)
    assert "the return annotation of test_core_annotations.total names Decimal" in message
    assert "TYPE_CHECKING" in message
    assert "fix: import Decimal at module level" in message


def test_registering_a_provider_whose_return_type_is_missing_is_refused() -> None:
    with pytest.raises(InvalidSignature, match=r"return annotation of .*total names Decimal"):
        Container().provide(total, scope=Scope.APP)


def test_resolve_by_a_missing_type_says_which_name() -> None:
    message = compile_error(by_missing_type)
    assert "parameter 'm' of test_core_annotations.by_missing_type names Message" in message
    assert "Resolve()" in message and "fix: import Message at module level" in message


def test_a_marker_naming_a_missing_resolver_says_which_name() -> None:
    message = compile_error(names_missing_resolver)
    assert "names only_for_checkers" in message and "the resolver it names" in message


def test_a_resolver_parameter_of_a_missing_type_says_which_name() -> None:
    message = compile_error(uses_lookup)
    assert "parameter 'amount' of test_core_annotations.lookup names Decimal" in message
