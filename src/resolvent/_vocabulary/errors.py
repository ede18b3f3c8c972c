"""Every exception resolvent raises."""

from __future__ import annotations

from typing import Any

__all__ = (
    "AnswerPending",
    "AnswerTimeout",
    "CallTimeout",
    "InputRequired",
    "InvalidAnswer",
    "InvalidSignature",
    "NotAccepted",
    "ResolventError",
    "StateConflict",
    "StateError",
    "StateNotFound",
    "StateTooLarge",
    "StoreUnavailable",
)


class ResolventError(Exception):
    """Base class of every error raised by resolvent itself.

    Misuse at run time (running a plan outside an open container, a missing framework
    value, a call argument nobody supplied) is reported as a plain `ResolventError`
    whose message says how to fix it.
    """


class InvalidSignature(ResolventError, TypeError):
    """A function or dependency graph cannot be compiled into a plan.

    Raised at registration for what one function shows (a marker inside a union, two
    `Elicit` arms in a return annotation) and at `Container.compile` for what needs the
    whole graph (cycles, captive dependencies, ambiguous or missing providers). Never
    raised after a resolver has started running.

    Attributes:
        path: for a cycle or a captive dependency, the functions from the compiled one
            to the problem, in order (empty otherwise).
        offending: how many trailing edges of *path* are the mistake (the whole cycle,
            or the one captive edge).
    """

    def __init__(self, message: str, *, path: tuple[str, ...] = (), offending: int = 0) -> None:
        super().__init__(message)
        self.path = path
        self.offending = offending

    def _drawing(self) -> tuple[tuple[str, ...], list[tuple[int, int, bool]]]:
        """Nodes and edges (from, to, offending) of the path; a cycle closes on itself."""
        names, first_bad = self.path, len(self.path) - 1 - self.offending
        edges = [(i, i + 1, i >= first_bad) for i in range(len(names) - 1)]
        if self.offending and len(names) > 1 and names[-1] == names[first_bad]:
            names = names[:-1]
            edges[-1] = (len(names) - 1, first_bad, True)
        return names, edges

    def to_mermaid(self) -> str:
        """The offending path as a Mermaid flowchart, the mistake drawn in red."""
        names, edges = self._drawing()
        lines = ["flowchart TD", *(f'  n{i}["{name}"]' for i, name in enumerate(names))]
        for number, (a, b, bad) in enumerate(edges):
            lines.append(f"  n{a} --> n{b}")
            if bad:
                lines.append(f"  linkStyle {number} stroke:#dc2626,stroke-width:3px")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """The offending path as a Graphviz digraph, the mistake drawn in red."""
        names, edges = self._drawing()
        lines = ["digraph error {", "  node [shape=box];"]
        lines += [f'  n{i} [label="{name}"];' for i, name in enumerate(names)]
        red = ' [color="#dc2626", penwidth=3]'
        for a, b, bad in edges:
            lines.append(f"  n{a} -> n{b}{red if bad else ''};")
        lines.append("}")
        return "\n".join(lines)


class NotAccepted(ResolventError):
    """An elicitation was declined or cancelled, and its consumer wanted the bare value.

    Annotate the parameter as `Annotated[ElicitationResult[T], Resolve(fn)]` to receive
    the outcome instead and branch on it.

    Attributes:
        parameter: the consumer's parameter name.
        consumer: the qualified name of the consuming function.
        action: `"decline"` or `"cancel"`.
    """

    def __init__(self, parameter: str, consumer: str, action: str) -> None:
        self.parameter = parameter
        self.consumer = consumer
        self.action = action
        verb = "declined" if action == "decline" else "cancelled"
        super().__init__(
            f"parameter {parameter!r} of {consumer} could not be resolved: "
            f"the user {verb} the elicitation"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.parameter, self.consumer, self.action))


class InvalidAnswer(ResolventError):
    """An answer to a question did not fit the question's schema or kind.

    The message names the resolver and the parameter its value was for, and never
    repeats the answer's content.

    Attributes:
        resolver: the wire key of the resolver whose question was answered, once known
            (None while the error has not yet left the question's parser).
        parameter: the parameter the resolver's value was for, once known.
        detail: what was wrong with the answer, without the resolver's name.
    """

    def __init__(
        self,
        message: str,
        *,
        resolver: str | None = None,
        detail: str | None = None,
        parameter: str | None = None,
    ):
        super().__init__(message)
        self.resolver = resolver
        self.parameter = parameter
        self.detail = message if detail is None else detail

    @classmethod
    def at(
        cls, step_name: str, wire_key: str, exc: InvalidAnswer, parameter: str | None = None
    ) -> InvalidAnswer:
        """*exc* raised by a question's parser, placed at the resolver that asked it (and
        the *parameter* its value was for)."""
        where = step_name if parameter is None else f"{step_name} (for parameter {parameter!r})"
        return cls(f"{where}: {exc}", resolver=wire_key, detail=exc.detail, parameter=parameter)


class AnswerPending(Exception):
    """A question has no answer yet in this round of a multi-round call. Never reaches a
    caller: the interpreter marks the value pending, and a resolution by generated code
    hands over to the interpreter there (`Call._resolve`, `Call.run`); the round ends in
    `InputRequired`."""


class InputRequired(ResolventError):
    """Resolution stopped because questions must be answered first (multi-round mode).

    Raised by a call scope opened with ``rounds=True`` when a resolver asked a question
    that has no answer yet. Every question that could be asked in this round is in
    *questions* (independent questions are batched). Resume in a fresh call scope with
    ``container.call(rounds=True, answers=..., state=exc.state)``.

    Attributes:
        questions: wire key -> the question object a resolver returned (e.g. `Elicit`).
        state: an opaque, JSON-serializable string carrying the answers recorded so far.
    """

    def __init__(self, questions: dict[str, Any], state: str) -> None:
        self.questions = questions
        self.state = state
        super().__init__(f"{len(questions)} question(s) need an answer: {', '.join(questions)}")


def _seconds(value: float) -> str:
    return repr(float(value))


class CallTimeout(ResolventError, TimeoutError):
    """``call_timeout`` expired while a call's dependencies were being resolved.

    A `TimeoutError`: catch it as one. The message names the parameters whose resolvers
    were still running (when they can be told), the path to each, and the bound.

    Attributes:
        timeout: the container's ``call_timeout``, in seconds.
        consumer: the qualified name of the function whose call timed out.
        running: for each resolver still running when time ran out: *consumer*'s
            parameter it was resolving, the resolver's name, and the path to it.
        parameter: the first of those parameters (None if none could be told).
        brief: the first line of the message, fit to show a remote caller.
    """

    def __init__(
        self, timeout: float, consumer: str, running: tuple[tuple[str, str, str], ...] = ()
    ) -> None:
        self.timeout = timeout
        self.consumer = consumer
        self.running = running
        self.parameter = running[0][0] if running else None
        bound = f"call_timeout={_seconds(timeout)} s"
        if not running:
            brief = f"resolving the dependencies of {consumer} took longer than {bound}"
            lines = ""
            slow = "the slow resolver"
        else:
            params = " and ".join(dict.fromkeys(f"`{param}`" for param, _, _ in running))
            names = ", ".join(name for _, name, _ in running)
            verb = "was" if len(running) == 1 else "were"
            brief = f"resolving {params} took longer than {bound} ({names} {verb} still running)"
            lines = "".join(f"\n  path: {path}" for _, _, path in running)
            slow = names
        self.brief = brief
        super().__init__(
            f"{brief}{lines}\n  fix: make {slow} faster, or give it more time: "
            "Container(call_timeout=...)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.timeout, self.consumer, self.running))

    def __str__(self) -> str:
        return str(self.args[0])


class AnswerTimeout(ResolventError, TimeoutError):
    """Nobody answered a question within ``answer_timeout``.

    A `TimeoutError`: catch it as one. The time spent waiting for an answer does not count
    against ``call_timeout``; this is the separate bound for it.

    Attributes:
        timeout: the container's ``answer_timeout``, in seconds.
        resolver: the resolver whose question went unanswered.
        parameter: the parameter its value was for.
        brief: the message, fit to show a remote caller.
    """

    def __init__(self, timeout: float, resolver: str, parameter: str) -> None:
        self.timeout = timeout
        self.resolver = resolver
        self.parameter = parameter
        self.brief = (
            f"the question asked for `{parameter}` ({resolver}) was not answered within "
            f"answer_timeout={_seconds(timeout)} s"
        )
        super().__init__(
            f"{self.brief}\n  fix: answer sooner, or allow more time: Container(answer_timeout=...)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.timeout, self.resolver, self.parameter))

    def __str__(self) -> str:
        return str(self.args[0])


class StateError(ResolventError):
    """State kept across calls could not be read or written.

    Raised for a stored value that no longer validates (naming the kind and the handle),
    and, as its subclasses, a handle that is not found (`StateNotFound`), an edit that
    could not be made atomically (`StateConflict`) or a new value over the size limit
    (`StateTooLarge`).
    Nothing was written when it is raised. Under ``resolvent.mcp`` it reaches the client
    as a tool error with this text.
    """


class StateNotFound(StateError):
    """No state for this handle: unknown, expired, deleted or another principal's.

    The four cases share one message on purpose, so that an error tells a caller nothing
    about handles that are not theirs.
    """


class StateConflict(StateError):
    """Another call held the state for longer than this call could wait, or this call held
    it past its lease and lost it; nothing was written.

    Stores raise it from ``load`` when another call's lease holds the value.
    """


class StateTooLarge(StateError):
    """A value to save takes more bytes than its `State`'s ``max_size``; nothing was
    written. A web route answers it with 413 (Content Too Large)."""


class StoreUnavailable(StateError):
    """The state store could not be reached, or did not answer in time.

    Raised when a store's server is down, unreachable, refuses, drops the connection or
    stays silent past the store's own timeout (or the call's remaining
    ``call_timeout``), at start-up and mid-traffic alike. The message names the store
    (its URL without a password) and the cause. A store that comes back is used again
    by the next call; nothing needs restarting.

    A read or the start of an edit that fails this way changed nothing. When the final
    write of an edit fails this way, the store may or may not have applied it before the
    connection broke. Under ``resolvent.mcp`` the client reads *brief* as a tool error;
    ``resolvent.starlette`` answers 503 Service Unavailable.

    Attributes:
        store: where the store is: its URL without the password.
        cause: what went wrong, as the client library or the timeout said it.
        brief: the message fit to show a remote caller (no URL, no cause).
        fix: what to check, when the store says more than the default advice (a
            server that is running and reachable).
    """

    def __init__(self, store: str, cause: str, fix: str | None = None) -> None:
        self.store = store
        self.cause = cause
        self.fix = fix
        self.brief = "the state store is unavailable; try again in a moment"
        if fix is None:
            fix = (
                "check that the store's server is running and reachable from here; "
                "calls succeed again as soon as it answers"
            )
        super().__init__(
            f"the state store is unavailable: cannot reach {store}: {cause.rstrip('.')}.\n"
            f"  fix: {fix}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.store, self.cause, self.fix))
