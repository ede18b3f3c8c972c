"""The teardown shield of a call: free until a finalizer suspends.

Every finalizer of a call must run to completion, even when the call is cancelled. A call
scope does this with a cancel scope entered *below* every resource (before any setup) and
shielded for the teardown: a provider may hold a cancel scope of its own (a task group)
across its ``yield``, and only a scope entered before it is left in order after it.

Entering and leaving that scope costs more than a whole call with one resource. A call
therefore only records where it would have been entered (the *mark*: on asyncio the task's
innermost anyio cancel scope when the call starts, on trio the task's cancel status) and
puts the shield there when it is first needed:

- before a finalizer starts, if a cancellation from outside the call is in effect;
- otherwise the finalizer's first step runs directly, and if it finishes without
  suspending (the common case) no scope is ever made. Nothing can be delivered to a task
  before it suspends, so running that step unshielded changes nothing;
- if it suspends, the shield goes in before that suspension reaches the event loop.

The shield is made a child of the mark, below any scope a provider still holds, exactly
where the eagerly entered scope would be. Neither anyio nor trio has a public way to do
that, so it links the scope into the backend's tree as ``__enter__`` would have done at the
mark. `available` and `_trio_available` check that each tree has the shape this relies on;
without it (another anyio or trio), the eager scope is used. The test suite forces that
fallback with its ``--eager-shield`` option, which sets ``_ok`` and ``_trio_ok`` to False
before any call (tests/conftest.py); CI runs the shield's tests both ways.

One difference remains: a finalizer that itself cancels a scope *around its call* before
it first suspends is not shielded from that cancellation (shielding it then would make a
``checkpoint_if_cancelled`` it is already inside spin forever). Finalizers after it are.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Generator
from typing import Any
from weakref import ref as _ref

__all__ = ("NO_SCOPE", "available", "begin", "eager", "here", "insert", "outer_cancelled", "resume")

_backend: Any = None  # anyio's asyncio backend module, once checked
_ok: bool | None = None  # whether the backend has the shape `insert` relies on
NO_SCOPE = (None,)  # the mark of a task in no anyio cancel scope
# The task `begin` last saw, its anyio state (None while it has none) and the weak
# reference to look that state up by: made once per task, not per call.
_last: tuple[Any, Any, Any] = (None, None, None)
_current_tasks: dict[Any, Any] = {}  # asyncio's running task by loop
_states: dict[Any, Any] = {}  # anyio's task states, by weak reference to the task
_get_ident = threading.get_ident
_loop: Any = None  # the loop last seen running (in any thread)


def available() -> bool:
    """True if lazy shields work with the installed anyio (checked once)."""
    global _ok, _backend, _current_tasks, _states
    if _ok is None:
        try:
            import asyncio.tasks

            from anyio._backends import _asyncio as backend

            probe = backend.CancelScope(shield=True)
            for name in (
                "_active",
                "_cancel_called",
                "_cancelling_at_enter",
                "_child_scopes",
                "_host_task",
                "_parent_scope",
                "_shield",
                "_tasks",
            ):
                getattr(probe, name)
            if "cancel_scope" not in backend.TaskState.__slots__:
                raise AttributeError("TaskState.cancel_scope")
            states: Any = vars(backend)["_task_states"]
            _states = states.data  # the WeakKeyDictionary's own dict, by weak reference
            _current_tasks = vars(asyncio.tasks)["_current_tasks"]
            _backend = backend
            _ok = True
        except (ImportError, AttributeError, KeyError, TypeError):
            _ok = False
    return _ok


def begin() -> Any:
    """The mark of a call about to set resources up: a 1-tuple (lazy, asyncio), or an
    entered cancel scope to shield at teardown (trio, or an anyio without the shape)."""
    global _last
    loop = _loop
    # A loop runs in one thread at a time: if the last one seen runs in this thread, it
    # is the running loop (asking asyncio costs a system call, to check the process id).
    if loop is None or loop._thread_id != _get_ident():
        loop = _running()
        if loop is None:
            return _begin_other()
    task = _current_tasks[loop]
    last = _last
    if last[0] is not task:
        key = _ref(task)
        state = _states.get(key)
        _last = (task, state, key)
        if state is None:
            return NO_SCOPE
    else:
        state = last[1]  # a task keeps its anyio state object for as long as it runs
        if state is None:  # it had none: anyio makes one when it first enters a scope
            state = _states.get(last[2])
            if state is None:
                return NO_SCOPE
            _last = (task, state, last[2])
    scope = state.cancel_scope
    return NO_SCOPE if scope is None else (scope,)


def here() -> Any:
    """The current task's innermost cancel scope (its cancel status on trio), to tell
    whether code left one open: compare what it returns before and after. Without the
    shape `available` checks, a new object each time: everything looks held open."""
    mark = begin()
    if mark.__class__ is tuple:
        return mark[0]
    mark.__exit__(None, None, None)  # an eager scope, entered just now
    return object()


def _task() -> Any:
    loop = _loop
    if loop is None or loop._thread_id != _get_ident():
        loop = _running()
    return _current_tasks[loop]


def _running() -> Any:
    """The running asyncio loop, remembered for `begin`; None on trio (or without the
    shape `available` checks)."""
    global _loop, _ok
    asyncio = sys.modules.get("asyncio")
    if asyncio is None or not available():
        return None
    loop = asyncio._get_running_loop()  # pyright: ignore[reportPrivateUsage]
    if loop is None:
        return None
    if _current_tasks.get(loop) is not asyncio.current_task(loop):  # not where asyncio keeps it
        _ok = False
        return None
    if isinstance(getattr(loop, "_thread_id", None), int):
        _loop = loop
    return loop


def _begin_other() -> Any:
    """`begin` without a running asyncio loop: on trio the mark is the task's cancel
    status (trio's node of the scope tree); else an eager scope."""
    trio = sys.modules.get("trio")
    if trio is not None and _trio_available():
        try:
            task = trio.lowlevel.current_task()
        except RuntimeError:  # trio is imported but not running here
            return eager()
        return (task._cancel_status,)
    return eager()


_trio_ok: bool | None = None  # whether trio's scope tree has the shape `_insert_trio` uses
_Status: Any = ()  # trio's CancelStatus class, once checked (a class nothing else has)


def _trio_available() -> bool:
    global _trio_ok, _Status
    if _trio_ok is None:
        try:
            import trio
            from trio._core import _run  # pyright: ignore[reportPrivateUsage]

            probe = trio.CancelScope(shield=True)
            for name in ("_cancel_status", "_has_been_entered"):
                getattr(probe, name)
            status: Any = _run.CancelStatus
            for name in ("parent", "effectively_cancelled"):
                getattr(status, name)
            if not isinstance(vars(status)["parent"], property):
                raise AttributeError("CancelStatus.parent")
            _Status = status
            _trio_ok = True
        except (ImportError, AttributeError, KeyError, TypeError):
            _trio_ok = False
    return _trio_ok


def eager() -> Any:
    """A cancel scope entered now, to shield at teardown (what `begin` gives on trio)."""
    import anyio

    return anyio.CancelScope().__enter__()


def outer_cancelled(mark: Any) -> bool:
    """True if a cancellation is in effect at *mark*: one from outside the call."""
    if mark.__class__ is _Status:
        return bool(mark.effectively_cancelled)
    scope = mark
    while scope is not None:
        if scope._cancel_called:
            return True
        if scope._shield:
            return False
        scope = scope._parent_scope
    return False


def insert(mark: Any) -> Any:
    """Enter a shielded cancel scope as a child of *mark*, below the scopes still open
    above it; the caller exits it (``__exit__``) once every finalizer is done."""
    if mark.__class__ is _Status:
        return _insert_trio(mark)
    assert _backend is not None
    shield = _backend.CancelScope(shield=True)
    task = _task()
    state = _states.get(_ref(task))
    inner = None if state is None else state.cancel_scope
    at = mark
    above = inner
    while above is not None and above is not at and above._parent_scope is not at:
        above = above._parent_scope
    if above is None or above is at:  # nothing open above the mark: an ordinary enter
        return shield.__enter__()
    # What `__enter__` would have done at the mark; then `above` moves under the shield.
    # The task stays in its innermost scope's task set, as it is when a scope is open.
    shield._host_task = task
    shield._parent_scope = at
    shield._active = True
    shield._cancelling_at_enter = task.cancelling()
    if at is not None:
        at._child_scopes.discard(above)
        at._child_scopes.add(shield)
    above._parent_scope = shield
    shield._child_scopes.add(above)
    return shield


def _insert_trio(mark: Any) -> Any:
    """`insert` on trio, where the tree's nodes are cancel statuses: the shield's status
    becomes a child of *mark* and the parent of the first status still open above it."""
    import trio

    shield = trio.CancelScope(shield=True)
    above: Any = trio.lowlevel.current_task()._cancel_status  # pyright: ignore[reportPrivateUsage]
    while above is not None and above is not mark and above.parent is not mark:
        above = above.parent
    if above is None or above is mark:  # nothing open above the mark: an ordinary enter
        return shield.__enter__()
    # What `__enter__` does, at the mark; the task's own (innermost) status stays.
    shield._has_been_entered = True  # pyright: ignore[reportPrivateUsage]
    status = _Status(scope=shield, parent=mark)
    shield._cancel_status = status  # pyright: ignore[reportPrivateUsage]
    above.parent = status
    return shield


@types.coroutine
def resume(step: Any, pending: Any) -> Generator[Any, Any, Any]:
    """Go on with *step*, an awaitable already started that suspended on *pending*: hand
    *pending* to the event loop, then drive *step* to its end."""
    while True:
        try:
            sent = yield pending
        except GeneratorExit:
            step.close()
            raise
        except BaseException as error:
            try:
                pending = step.throw(error)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                pending = step.send(sent)
            except StopIteration as stop:
                return stop.value
