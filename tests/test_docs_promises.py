"""Every promise the docs make names the test that holds it, and that test exists.

A *promise sentence* is one the docs mark explicitly: an HTML comment right after it,

    Kinds that name the same URL share one store.
    <!-- promise: tests/test_promises_state.py::test_kinds_naming_the_same_url_share_one_store -->

naming one or more tests (``tests/FILE.py::NAME``, ``tests/FILE.py::Class::NAME``; a ``*`` in
a name matches several; separated by spaces or commas). The comment does not render. On
RELIABILITY.md each guarantee (a ``###`` section under "Guarantees") is the promise, and the
tests it names in backticks hold it.

This module fails when a marked promise names no test, or a test that does not exist (a
test renamed or deleted without its promise), and when a page that makes promises has lost
its marks.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("docs/concepts.md", "docs/state.md", "docs/mcp.md", "docs/starlette.md")
MARK = re.compile(r"<!--\s*promise:(.*?)-->", re.DOTALL)
TEST_ID = re.compile(r"tests/[\w/]+\.py(?:::[\w*\[\]-]+)+")
# At least this many marked promises on each page: a page cannot lose its index silently.
LEAST = {"docs/concepts.md": 15, "docs/state.md": 12, "docs/mcp.md": 10, "docs/starlette.md": 6}


@functools.cache
def names_in(path: str) -> frozenset[str]:
    """``NAME`` and ``Class::NAME`` of every test function in the file at *path*."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}::{item.name}")
    return frozenset(n for n in names if n.rpartition("::")[2].startswith("test"))


def missing(test_id: str) -> str | None:
    """Why *test_id* names no test, or None if it names at least one."""
    path, _, name = test_id.partition("::")
    if not (ROOT / path).is_file():
        return f"{test_id}: no file {path}"
    if not name:
        return None
    name = name.split("[")[0]  # a parametrized id names its function
    if not any(fnmatch.fnmatchcase(n, name) for n in names_in(path)):
        return f"{test_id}: no test {name!r} in {path}"
    return None


def promises(text: str) -> list[tuple[int, str, list[str]]]:
    """(line, the sentence before the mark, the tests it names) for each mark in *text*."""
    found = []
    for match in MARK.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1].strip()
        found.append((line, before, TEST_ID.findall(match.group(1))))
    return found


def problems(page: str, text: str) -> list[str]:
    out = []
    for line, sentence, tests in promises(text):
        if not tests:
            out.append(f"{page}:{line}: a promise names no test: {sentence[:80]!r}")
        out += [f"{page}:{line}: {why}" for t in tests if (why := missing(t)) is not None]
    return out


@pytest.mark.parametrize("page", PAGES)
def test_every_marked_promise_names_a_test_that_exists(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    assert problems(page, text) == []
    assert len(promises(text)) >= LEAST[page], f"{page} lost its marked promises"


def test_every_reliability_guarantee_names_a_test_that_exists() -> None:
    text = (ROOT / "RELIABILITY.md").read_text(encoding="utf-8")
    guarantees = text.split("\n## Guarantees", 1)[1].split("\n## ", 1)[0]
    sections = re.split(r"\n(?=### )", guarantees)[1:]
    assert len(sections) >= 9
    for section in sections:
        title = section.splitlines()[0]
        named = re.findall(r"`(tests/[^`]+)`", section)
        assert named, f"RELIABILITY.md {title!r} names no test"
        for test_id in named:
            assert missing(test_id) is None, f"RELIABILITY.md {title!r}: {missing(test_id)}"


def test_a_promise_without_a_test_or_with_a_lost_one_is_reported() -> None:
    page = (
        "Values close in reverse order.\n<!-- promise: -->\n"
        "Renamed since.\n<!-- promise: tests/test_docs_promises.py::test_gone -->\n"
        "Held.\n<!-- promise: tests/test_docs_promises.py::test_a_promise_* -->\n"
    )
    assert problems("page.md", page) == [
        "page.md:2: a promise names no test: 'Values close in reverse order.'",
        "page.md:4: tests/test_docs_promises.py::test_gone: no test 'test_gone' in "
        "tests/test_docs_promises.py",
    ]
