"""Stand-ins for ``resolvent bench`` (see docs/benchmarks.md).

A person's answer to a question is not resolution time, and the MCP ``Context`` exists
only inside a request, so the bench refuses `delete_note` as it is and says which resolver
to replace. This is the replacement: the confirmation answered at once, without asking.
"""

from .providers import Confirm

__all__ = ("keep_the_note",)


async def keep_the_note() -> Confirm:
    """`confirm_delete`, answered "no" at once: `delete_note` keeps the note."""
    return Confirm(confirm=False)
