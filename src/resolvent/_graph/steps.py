"""Building a plan's steps from the compiler's walk: each resolver's step, made once and
shared by every later plan that reads it so, the plan's own copy of a step that may ask
(its wire key), and the inputs, argument names and scope sets plans share as values.
Never walks, reads or checks a function: `compiler` hands it the nodes in order, and it
hands back a `Graph` (the steps before they have code).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._reading.annotations import NO_DEFAULT
from .._reading.kinds import Kind
from .._reading.params import Param
from .._reading.signature import FunctionInfo
from .._vocabulary.scopes import Scope
from .checks import refuse_unclosable
from .plan import AskingStep, Input, Step, keep_shared

if TYPE_CHECKING:
    from .checks import Node, Walk
    from .registry import Expansion, Piece, Registry

    class WalkedNode(Node, Protocol):
        """A node once the walk expanded it: its resolver edges and its inputs."""

        @property
        def edges(self) -> Sequence[tuple[Param, Hashable]] | None: ...
        @property
        def inputs(self) -> Sequence[Input | tuple[Param, Hashable]]: ...

    class Walked(Walk, Protocol):
        """The compiler's walk, as building the steps reads it."""

        @property
        def nodes(self) -> Mapping[Hashable, WalkedNode]: ...
        @property
        def registry(self) -> Registry: ...
        @property
        def memo(self) -> dict[Hashable, Expansion] | None:
            """The shared expansions, None with overrides."""
            ...

        @property
        def used_values(self) -> list[Any]: ...


__all__ = (
    "Graph",
    "arg_input",
    "build_steps",
    "edge_input",
    "join_pieces",
    "joined",
    "scope_set",
    "shared_arguments",
)


class Graph:
    """What the compiler hands to code generation: a plan's steps before it has code. Not
    `Frozen`: made once per compile, read once, never shared (a `put` costs ten stores)."""

    __slots__ = ("arguments", "asks", "call_resources", "call_threads", "inputs", "root",
                 "scopes", "steps", "value_types")  # fmt: skip
    root: FunctionInfo
    steps: tuple[Step, ...]
    inputs: tuple[Input, ...]
    arguments: tuple[str, ...]
    value_types: tuple[Any, ...]
    scopes: frozenset[Scope]
    call_resources: bool
    """Some CALL step is a resource (entered, torn down when the call ends)."""
    call_threads: bool
    """Some CALL step is a plain sync function run in a worker thread."""
    asks: bool  # some step may ask

    def __init__(
        self,
        root: FunctionInfo,
        steps: tuple[Step, ...],
        inputs: tuple[Input, ...],
        arguments: tuple[str, ...],
        value_types: tuple[Any, ...],
        scopes: frozenset[Scope],
        call_resources: bool,
        call_threads: bool,
        asks: bool,
    ) -> None:
        self.root = root
        self.steps = steps
        self.inputs = inputs
        self.arguments = arguments
        self.value_types = value_types
        self.scopes = scopes
        self.call_resources = call_resources
        self.call_threads = call_threads
        self.asks = asks


def build_steps(
    walk: Walked,
    order: list[Hashable],
    root_inputs: list[Input | tuple[Param, Hashable]],
    arguments: tuple[str, ...],
    plain: dict[int, str] | None,
) -> Graph:
    """The plan's steps in *order*, and what they hold (in the same pass).

    Each resolver has a slot, its steps' `Step.index` in every plan of the container
    (`Registry.slots`), so a step holds nothing of where it sits in a plan: a plan
    without overrides takes the step an earlier plan made for the same reading and
    inputs (`Expansion.step`), and makes only the steps of the resolvers new to it.
    A step that may ask is copied: its wire key and parameter are the plan's own.
    """
    scopes: set[Scope] = set()
    call_resources = call_threads = False
    registry = walk.registry
    slots = registry.slot_table()
    taints: dict[Hashable, frozenset[int]] = {}
    wire_seen: dict[str, int] = {}
    steps: list[Step] = []
    nodes = walk.nodes
    overridden = plain is not None
    memo = registry.expansions  # each resolver's step is its expansion's
    shared = walk.memo  # None with overrides: their plans take no shared step
    for key in order:
        node = nodes[key]
        provider = node.provider
        expansion = memo.get(key)
        like = None
        if expansion is not None and expansion.provider is provider:
            like = expansion.step  # None until a plan built it
            if like is not None and expansion.inputs is node.inputs and not overridden:
                scope = like.scope
                scopes.add(scope)
                if scope is _CALL:  # what the step says, as below (by identity: no hashing)
                    kind = like.kind
                    if kind is _SYNC:
                        call_threads = call_threads or not like.inline
                    elif kind is not _ASYNC:
                        call_resources = True
                step = like
                if step.may_ask:
                    step = _asking(step, wire_seen, step.wire_key, node.param)
                steps.append(step)
                continue
        taint = _NO_TAINT  # nothing is replaced
        if plain is not None:  # with overrides
            # A value built from a replacement is cached under the ids of the blocks
            # it depends on: another block (entered or left) does not rebuild it, and
            # leaving one of its blocks finds and closes it.
            replaced = walk.replaced.get(key)
            taint = frozenset(() if replaced is None else (replaced,)).union(
                *(taints.get(child, ()) for _, child in node.edges or ())
            )
            if taint:
                taints[key] = taint
                refuse_unclosable(walk, node, taint, plain)
        if like is not None:
            # The resolver's step in other plans: all but its inputs (and, with
            # overrides, its key) hold here too.
            fn, name, scope, kind = like.fn, like.name, like.scope, like.kind
            inline, may_ask, base, awaits = (
                like.inline,
                like.may_ask,
                like.wire_key,
                like.awaits,
            )
        else:
            info = provider
            fn, name, scope, kind, awaits = (
                info.fn,
                info.name,
                provider.scope,
                info.kind,
                info.awaits,
            )
            # An async factory made its context manager on the event loop: it is
            # entered and exited there too, not in a worker thread.
            inline = provider.inline or awaits
            may_ask = info.may_ask and scope is _CALL
            # Only a step that may ask has a wire key (its questions carry it).
            base = _wire_base(fn) if may_ask else ""
        scopes.add(scope)
        if scope is _CALL:
            call_resources = call_resources or kind.is_resource
            call_threads = call_threads or (kind is _SYNC and not provider.inline)
        slot = slots.get(key)
        if slot is None:
            slot = registry.new_slot(key)
        # Positional, in field order (a step per resolver: keywords cost twice as
        # much): index, fn, name, key, scope, kind, inline, may_ask, inputs, param,
        # awaits. Only a step that may ask has a wire key (an `AskingStep`); only one
        # that never does is called by position (`Step.positional`).
        inputs = _inputs(node.inputs, slots, True)
        fields = (
            slot,
            fn,
            name,
            ("override", taint, key) if taint else key,
            scope,
            kind,
            inline,
            may_ask,
            inputs,
            node.param,
            awaits,
        )
        step = (
            AskingStep(base, *fields)
            if may_ask
            else Step(
                *fields, _positional(fn, inputs) if scope is _CALL and kind is _ASYNC else None
            )
        )
        if (
            shared is not None
            and expansion is not None
            and expansion.provider is provider
            and expansion.inputs is node.inputs
        ):
            # Its inputs are its resolver's checked expansion, the same object in
            # every plan that reads it so: later plans take this step.
            expansion.step = step
        if may_ask:
            step = _asking(step, wire_seen, base, node.param)
        steps.append(step)
    return Graph(
        walk.root,
        tuple(steps),
        _inputs(root_inputs, slots),
        arguments,
        tuple(walk.used_values),
        scope_set(scopes),
        call_resources,
        call_threads,
        bool(wire_seen),  # each step that may ask took a wire key
    )


def join_pieces(
    walk: Walked,
    pieces: list[Piece],
    root_inputs: list[Input | tuple[Param, Hashable]],
    arguments: tuple[str, ...],
) -> Graph | None:
    """The plan of a handler whose every resolver parameter reaches a sub-graph kept
    whole (`Piece`): their steps joined in order, each once, as walking and splicing
    them gives, with nothing walked, checked or built again. None when the bound on
    slots emptied the expansions: the walk decides."""
    slots = walk.registry.slot_table()
    if not walk.memo:  # emptied by the bound on slots: every step is built again
        return None
    return joined(walk.root, pieces, _inputs(root_inputs, slots), arguments, walk.used_values)


def joined(
    root: FunctionInfo,
    pieces: list[Piece],
    inputs: tuple[Input, ...],
    arguments: tuple[str, ...],
    used: list[Any],
) -> Graph:
    """The plan of *root* that joins *pieces* (at least one), each step once (see
    `join_pieces`), fed *inputs*; *used* holds the framework value types its own
    parameters take, to which the pieces' are added."""
    every: list[Step] = []
    scopes = _NO_SCOPES
    call_resources = False
    for piece in pieces:
        every += piece.steps
        if piece.scopes is not scopes:  # each piece's is one of the shared sets
            scopes = scope_set(scopes | piece.scopes)
        call_resources = call_resources or piece.call_resources
        for declared in piece.values:
            if declared not in used:
                used.append(declared)
    # Each step once, first come first kept: one object per resolver, as every piece
    # made since the registry's last `piece_epoch` holds its expansion's step.
    steps = pieces[0].steps if len(pieces) == 1 else tuple(dict.fromkeys(every))
    return Graph(
        root,
        steps,
        inputs,
        arguments,
        tuple(used),
        scopes,
        call_resources,
        False,  # a piece has no worker-thread CALL step
        False,  # nor one that may ask
    )


_NO_SCOPES: frozenset[Scope] = frozenset()


def _asking(step: Step, wire_seen: dict[str, int], base: str, param: str) -> Step:
    """The plan's own copy of a step that may ask (same slot, same inputs): its wire key
    (*base*, numbered from the second asking step of the plan with that base on) and the
    parameter its questions name."""
    count = wire_seen.get(base, 0)
    wire_seen[base] = count + 1
    wire_key = base if count == 0 else f"{base}#{count}"
    return AskingStep(
        wire_key,
        step.index,
        step.fn,
        step.name,
        step.key,
        step.scope,
        step.kind,
        step.inline,
        step.may_ask,
        step.inputs,
        param,
        step.awaits,
    )


def _inputs(
    items: Sequence[Input | tuple[Param, Hashable]],
    slots: dict[Hashable, int],
    step_of: bool = False,
) -> tuple[Input, ...]:
    """The plan's inputs for *items*: a resolver edge becomes the input of its step.

    A step's tuple (*step_of*) is a value too: one made only of shared inputs (of a step's
    value, of a call argument without default) is the one every step with those inputs
    shares, in any container (the same resolvers compiled twice). A handler's own inputs
    are made once per plan, as they were: looking them up would cost each compile."""
    if not items:
        return ()
    made: list[Input] = []
    # What the tuple holds, while it holds only shared inputs: each one's name and
    # step (-1 for a call argument), which are the input.
    shape: list[str | int] | None = [] if step_of else None
    for item in items:
        if isinstance(item, Input):
            made.append(item)
            if shape is not None:
                if item.source == "arg" and item.default is NO_DEFAULT:
                    shape += (item.name, -1)
                else:
                    shape = None
            continue
        param, child = item
        step = slots[child]
        made.append(edge_input(param, step))
        if param.outcome is not None:
            shape = None
        elif shape is not None:
            shape += (param.name, step)
    if shape is None:
        return tuple(made)
    key = tuple(shape)
    shared = _INPUT_TUPLES.get(key)
    return keep_shared(_INPUT_TUPLES, key, tuple(made)) if shared is None else shared


def edge_input(param: Param, slot: int) -> Input:
    """The input of *param* fed by the step in *slot*. Inputs are values: every plan
    shares the one for a parameter name and step (one that wants the whole outcome is
    made each time)."""
    if param.outcome is not None:
        return Input(param.name, "step", step=slot, outcome=param.outcome)
    found = _STEP_INPUTS.get((param.name, slot))
    if found is None:
        found = keep_shared(_STEP_INPUTS, (param.name, slot), Input(param.name, "step", step=slot))
    return found


def arg_input(name: str, default: Any) -> Input:
    """The input of the call argument *name*: one that has no default is a value every
    plan shares, as a step's input is."""
    if default is not NO_DEFAULT:
        return Input(name, "arg", arg=name, default=default)
    found = _ARG_INPUTS.get(name)
    return keep_shared(_ARG_INPUTS, name, Input(name, "arg", arg=name)) if found is None else found


_ARG_INPUTS: dict[str, Input] = {}


def shared_arguments(names: tuple[str, ...]) -> tuple[str, ...]:
    """The names of a handler's own arguments: the one tuple every plan whose handler
    takes the same ones shares, as a value."""
    found = _ARGUMENTS.get(names)
    return keep_shared(_ARGUMENTS, names, names) if found is None else found


_ARGUMENTS: dict[tuple[str, ...], tuple[str, ...]] = {}
_STEP_INPUTS: dict[tuple[str, int], Input] = {}
_INPUT_TUPLES: dict[tuple[str | int, ...], tuple[Input, ...]] = {}

_NO_TAINT: frozenset[int] = frozenset()
_CALL = Scope.CALL  # read per step: a module global, not an enum class attribute
_SYNC = Kind.SYNC
_ASYNC = Kind.ASYNC  # with _SYNC, the kinds that are no resource


def scope_set(scopes: set[Scope] | frozenset[Scope]) -> frozenset[Scope]:
    """The plan's scopes as the one frozenset every plan with those scopes shares (there
    are eight: a frozenset of three costs a plan more than its pointer)."""
    made = frozenset(scopes)
    return _SCOPE_SETS.setdefault(made, made)


_SCOPE_SETS: dict[frozenset[Scope], frozenset[Scope]] = {}


def _positional(fn: Any, inputs: tuple[Input, ...]) -> tuple[int, ...] | None:
    """The slots of *inputs* when calling *fn* with their values as positional
    arguments, in order, binds each to the parameter it names (see `Step.positional`):
    a plain function whose first parameters they are, each a step's value as it is."""
    if type(fn) is not types.FunctionType:
        return None
    code = fn.__code__
    names = code.co_varnames[: code.co_argcount]
    if code.co_posonlyargcount or len(inputs) > len(names):
        return None
    for item, name in zip(inputs, names, strict=False):
        if item.source != "step" or item.outcome is not None or item.name != name:
            return None
    return tuple([item.step for item in inputs])


def _wire_base(fn: Any) -> str:
    """A resolver's question key on the wire: ``module:qualname``, as the MCP SDK spells it.

    Stable across processes (a later round may run on another worker); resolvers that
    share it are numbered by the caller (``base``, ``base#1``, ...).
    """
    target = fn.func if isinstance(fn, functools.partial) else fn
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}:{qualname}"
