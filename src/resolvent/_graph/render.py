"""A plan for people to read: its text view (`Plan.describe`), its Mermaid flowchart and its
Graphviz digraph (for `resolvent graph` and the docs), and the path by which it reaches a
step (`Plan.path_to`, which errors name). Loaded by the first of these: no call needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .._reading.annotations import NO_DEFAULT, type_name
from .._vocabulary.scopes import Scope

if TYPE_CHECKING:
    from .._reading.kinds import Kind

    # What a rendering reads of `_graph/plan.py`'s Input, Step and Plan (which import this
    # module when asked for a rendering, so it names none of them).

    class Input(Protocol):
        @property
        def name(self) -> str: ...
        @property
        def source(self) -> str: ...
        @property
        def step(self) -> int: ...
        @property
        def arg(self) -> str: ...
        @property
        def default(self) -> Any: ...
        @property
        def value_type(self) -> Any: ...
        @property
        def outcome(self) -> Any: ...

    class Step(Protocol):
        @property
        def index(self) -> int: ...
        @property
        def name(self) -> str: ...
        @property
        def scope(self) -> Scope: ...
        @property
        def kind(self) -> Kind: ...
        @property
        def inline(self) -> bool: ...
        @property
        def may_ask(self) -> bool: ...
        @property
        def inputs(self) -> tuple[Input, ...]: ...

    class Plan(Protocol):
        @property
        def name(self) -> str: ...
        @property
        def arguments(self) -> tuple[str, ...]: ...
        @property
        def steps(self) -> tuple[Step, ...]: ...
        @property
        def inputs(self) -> tuple[Input, ...]: ...
        @property
        def fn_threaded(self) -> bool: ...
        def step_at(self, index: int) -> Step: ...
        def position(self, index: int) -> int: ...
        def parent(self, index: int) -> tuple[int, str]: ...


__all__ = ("describe", "parents_of", "path_to", "to_dot", "to_mermaid")


def describe(plan: Plan) -> str:
    """`Plan.describe`: the steps in order with scope, kind and sources."""
    lines = [f"plan for {plan.name}({', '.join(plan.arguments)}): {len(plan.steps)} step(s)"]
    width = max((len(s.name) for s in plan.steps), default=0)
    for number, step in enumerate(plan.steps, 1):
        asks = ", may ask" if step.may_ask else ""
        lines.append(
            f"  {number:>3}. {step.name:<{width}}  {step.scope.name:<7} "
            f"{step.kind.value}{'' if step.kind.is_async or step.inline else ' (thread)'}{asks}"
        )
        for item in step.inputs:
            lines.append(f"         {item.name} <- {_source_text(plan, item)}")
    lines.append(f"  -> {plan.name}{' (thread)' if plan.fn_threaded else ''}")
    for item in plan.inputs:
        lines.append(f"         {item.name} <- {_source_text(plan, item)}")
    return "\n".join(lines)


def _source_text(plan: Plan, item: Input) -> str:
    if item.source == "step":
        step = plan.step_at(item.step)
        text = f"step {plan.position(item.step) + 1} ({step.name})"
        return text + (" as outcome" if item.outcome is not None else "")
    if item.source == "arg":
        return f"call argument {item.arg!r}" + (
            "" if item.default is NO_DEFAULT else f" (default {item.default!r})"
        )
    return f"framework value {type_name(item.value_type)}"


def _edges(plan: Plan) -> list[tuple[str, str, str]]:
    edges: list[tuple[str, str, str]] = []
    consumers: list[tuple[str, tuple[Input, ...]]] = [(f"s{s.index}", s.inputs) for s in plan.steps]
    consumers.append(("root", plan.inputs))
    for node, inputs in consumers:
        for item in inputs:
            if item.source == "step":
                edges.append((f"s{item.step}", node, item.name))
            elif item.source == "arg":
                edges.append((f"arg_{item.arg}", node, item.name))
            else:
                edges.append((f"val_{type_name(item.value_type)}", node, item.name))
    return edges


def to_mermaid(plan: Plan) -> str:
    """`Plan.to_mermaid`: a Mermaid flowchart, scopes coloured, questions marked."""
    out = ["flowchart TD"]
    for step in plan.steps:
        ask = " ❓" if step.may_ask else ""
        out.append(
            f'  s{step.index}["{step.name}<br/>{step.scope.name} · {step.kind.value}{ask}"]'
            f":::{step.scope.name.lower()}"
        )
    out.append(f'  root(["{plan.name}"]):::root')
    seen: set[str] = set()
    for source, target, label in _edges(plan):
        if source not in seen and not source.startswith("s"):
            seen.add(source)
            text = source.split("_", 1)[1]
            shape = (
                f'(["{text} (argument)"])' if source.startswith("arg_") else f'[/"{text} (value)"/]'
            )
            out.append(f"  {source}{shape}:::external")
        out.append(f"  {source} -->|{label}| {target}")
    out += [
        "  classDef app fill:#dbeafe,stroke:#1d4ed8",
        "  classDef session fill:#dcfce7,stroke:#15803d",
        "  classDef call fill:#fef9c3,stroke:#a16207",
        "  classDef root fill:#f3f4f6,stroke:#111827",
        "  classDef external fill:#ffffff,stroke:#6b7280,stroke-dasharray: 3 3",
    ]
    return "\n".join(out)


def to_dot(plan: Plan) -> str:
    """`Plan.to_dot`: a Graphviz DOT digraph, scopes coloured, questions marked."""
    colours = {Scope.APP: "#dbeafe", Scope.SESSION: "#dcfce7", Scope.CALL: "#fef9c3"}
    out = [
        "digraph plan {",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica"];',
    ]
    for step in plan.steps:
        ask = "\\n(may ask)" if step.may_ask else ""
        out.append(
            f'  s{step.index} [label="{step.name}\\n{step.scope.name} · '
            f'{step.kind.value}{ask}", '
            f'fillcolor="{colours.get(step.scope, "#f3f4f6")}"];'
        )
    out.append(f'  root [label="{plan.name}", shape=oval, fillcolor="#f3f4f6"];')
    seen: set[str] = set()
    for source, target, label in _edges(plan):
        if source not in seen and not source.startswith("s"):
            seen.add(source)
            text = source.split("_", 1)[1]
            kind = "argument" if source.startswith("arg_") else "value"
            out.append(f'  "{source}" [label="{text} ({kind})", shape=note, fillcolor="#ffffff"];')
        out.append(f'  "{source}" -> "{target}" [label="{label}"];')
    out.append("}")
    return "\n".join(out)


def parents_of(plan: Plan, at: Mapping[int, Step]) -> dict[int, tuple[int, str]]:
    """`Plan.parent`'s table: for each step, the step that first needs it and for which
    parameter (-1: the plan's function)."""
    # As the compiler walks: entering a step gives each of its inputs' steps met for
    # the first time this step as parent, then walks them in turn; the function's
    # parameters one after another.
    made: dict[int, tuple[int, str]] = {}
    entered: set[int] = set()

    def enter(index: int) -> list[int]:
        entered.add(index)
        children = [i for i in at[index].inputs if i.source == "step"]
        for item in children:
            made.setdefault(item.step, (index, item.name))
        return [item.step for item in children]

    for item in plan.inputs:
        if item.source != "step":
            continue
        made.setdefault(item.step, (-1, item.name))
        if item.step in entered:
            continue
        stack = [(item.step, enter(item.step), 0)]
        while stack:
            index, children, next_ = stack[-1]
            if next_ == len(children):
                stack.pop()
                continue
            stack[-1] = (index, children, next_ + 1)
            child = children[next_]
            if child not in entered:
                stack.append((child, enter(child), 0))
    return made


def path_to(plan: Plan, index: int) -> str:
    """`Plan.path_to`: ``root.param -> resolver.param -> ...``, which errors name."""
    hops: list[str] = [plan.step_at(index).name]
    while index >= 0 and len(hops) < 12:
        parent, param = plan.parent(index)
        name = plan.step_at(parent).name if parent >= 0 else plan.name
        hops.append(f"{name}({param}=...)")
        index = parent
    if index >= 0:
        hops.append("...")
    return " -> ".join(reversed(hops))
