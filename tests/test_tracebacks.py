"""What a user reads when a program stops on a resolvent error: the public name of the
exception (``resolvent.InvalidSignature``, where it is imported from, not the private
module that defines it), on the last line of a real traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import resolvent

ROOT = Path(__file__).resolve().parent.parent


def stderr_of(code: str, cwd: Path) -> list[str]:
    """The lines a script that fails prints on stderr, run in a fresh interpreter."""
    script = cwd / "script.py"
    script.write_text(textwrap.dedent(code), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    return proc.stderr.splitlines()


def test_a_traceback_names_the_public_exception(tmp_path: Path) -> None:
    lines = stderr_of(
        """
        from typing import Annotated

        from resolvent import Container, Resolve

        def handler(user: Annotated[str, Resolve()]) -> str:  # no provider offers a str
            return user

        Container().compile(handler)
        """,
        tmp_path,
    )
    assert lines[0] == "Traceback (most recent call last):"
    last = next(i for i, line in enumerate(lines) if line.startswith("resolvent."))
    assert lines[last].startswith("resolvent.InvalidSignature: ")
    assert "_errors" not in "\n".join(lines[last:])


def test_every_public_exception_is_named_where_it_is_imported_from() -> None:
    errors = [
        getattr(resolvent, name)
        for name in resolvent.__all__
        if isinstance(getattr(resolvent, name), type)
        and issubclass(getattr(resolvent, name), BaseException)
    ]
    assert len(errors) >= 8
    for error in errors:
        assert error.__module__ == "resolvent", error
        assert getattr(resolvent, error.__qualname__) is error  # what pickle looks up
