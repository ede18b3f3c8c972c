"""The topological sort of a compiled graph: the order its steps run in.

Knows keys and edges only; never reads functions, scopes or annotations.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import TypeVar

__all__ = ("toposort",)

K = TypeVar("K", bound=Hashable)


def toposort(
    post: Sequence[K],
    children: Callable[[K], Collection[K]],
    threaded: Callable[[K], bool],
) -> list[K]:
    """Topological order (Kahn) that keeps worker-thread steps adjacent.

    Adjacent sync steps share one thread hop, so among ready steps the sort prefers
    to continue a run of thread steps, and otherwise runs loop steps first.

    Args:
        post: every key, children before their consumers (the walk's post-order); ties
            between ready keys go to the earlier one.
        children: the distinct keys a key depends on.
        threaded: whether a key's step runs in a worker thread.
    """
    rank = {key: i for i, key in enumerate(post)}
    pending: dict[K, int] = {}
    consumers: dict[K, list[K]] = {key: [] for key in post}
    for key in post:
        below = children(key)
        pending[key] = len(below)
        for child in below:
            consumers[child].append(key)
    thread_ready: list[int] = []
    other_ready: list[int] = []

    def push(key: K) -> None:
        heapq.heappush(thread_ready if threaded(key) else other_ready, rank[key])

    for key in post:
        if pending[key] == 0:
            push(key)
    order: list[K] = []
    last_threaded = False
    while thread_ready or other_ready:
        if thread_ready and (last_threaded or not other_ready):
            key = post[heapq.heappop(thread_ready)]
            last_threaded = True
        else:
            key = post[heapq.heappop(other_ready)]
            last_threaded = False
        order.append(key)
        for consumer in consumers[key]:
            pending[consumer] -= 1
            if pending[consumer] == 0:
                push(consumer)
    return order
