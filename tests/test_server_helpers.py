"""The server runner of the tests fails fast, and says why, when a server misbehaves.

A server that never prints its address used to hang its test until pytest's timeout,
with nothing to show; the runner reads the output in a thread and bounds every wait.
"""

import re
import sys

import pytest

from uvicorn_helpers import ROOT, run_server

ADDRESS = re.compile(r"serving at (http://\S+)")


def python(code: str) -> list[str]:
    return [sys.executable, "-S", "-c", code]


@pytest.mark.slow  # in CI's slow job: the default run stays under 3 minutes
def test_a_server_that_never_says_where_it_is_fails_with_what_it_printed() -> None:
    silent = python("import sys, time; print('booting', file=sys.stderr); time.sleep(600)")
    with (
        pytest.raises(AssertionError) as info,
        run_server(silent, cwd=ROOT, started=ADDRESS, start_timeout=3.0),
    ):
        pytest.fail("a server that printed no address was taken as started")
    assert str(info.value).endswith("did not start in 3.0 s:\nbooting")


def test_a_server_that_exits_before_serving_says_how() -> None:
    failing = python("import sys; sys.exit('no such database: notes.db')")
    with pytest.raises(AssertionError) as info, run_server(failing, cwd=ROOT, started=ADDRESS):
        pytest.fail("a server that exited was taken as started")
    assert str(info.value).endswith("exited with 1 before serving:\nno such database: notes.db")


def test_a_line_that_never_comes_fails_with_what_was_printed() -> None:
    # Both lines are printed at once, before the address is read: no race on the output.
    server = python(
        "import time; print('pool opened\\nserving at http://127.0.0.1:1', flush=True);"
        " time.sleep(600)"
    )
    with run_server(server, cwd=ROOT, started=ADDRESS) as served:
        assert served.url == "http://127.0.0.1:1"
        with pytest.raises(AssertionError) as info:
            served.read_until(lambda output: "pool closed" in output, timeout=0.5)
    message = str(info.value)
    assert "did not print what the test waits for in 0.5 s:\n" in message
    assert message.endswith("pool opened\nserving at http://127.0.0.1:1")
