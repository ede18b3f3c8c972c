"""``resolvent bench``: where the time of a call goes, for the user's own function.

The attribution test runs resolvers that sleep known times and checks each sleep lands on
the right resolver (a sleep never returns early, so its lower bound is exact; the upper
bounds are generous). Nothing here asserts how fast resolvent is: whether the overhead the
command reports agrees with ``benchmarks/`` S1/S2 is ``python -m benchmarks.bench_check``
(run on a quiet machine); this suite only runs it once, tiny, to see that it works.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from resolvent.__main__ import main
from resolvent._reading.kinds import Kind
from resolvent._tools import bench as _bench
from resolvent._tools.bench import MODES, bench, refusals
from resolvent._tools.bench_report import render
from resolvent._tools.probe import Calibration, calibrate

HERE = Path(__file__).parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import bench_sample  # noqa: E402

# What timing costs is measured per process by `calibrate` (tested below); a fixed figure
# keeps these tests quick, and the sleeps they look for are thousands of times larger.
FIXED = Calibration({k.name: 50.0 for k in Kind}, {k.name: 100.0 for k in Kind}, 50.0)
MS = 1000.0  # µs


@pytest.fixture(autouse=True)
def _in_tests_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(HERE)  # the command imports modules from the working directory


@pytest.fixture(autouse=True)
def _small_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    # The command calibrates before it measures: 9 rounds of 1,000 lives of each step
    # kind, most of a second of CPU per run. Nothing these tests check depends on its
    # precision, so it runs small here, as test_calibration_measures_every_kind runs it.
    monkeypatch.setattr(_bench, "calibrate", functools.partial(calibrate, n=20, rounds=2))


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["bench", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def by_name(mode: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"].rpartition(".")[2]: r for r in mode["resolvers"]}


async def test_sleeps_are_attributed_to_the_resolvers_that_sleep() -> None:
    sleeps = {k: v * MS * 1000 for k, v in bench_sample.SLEEPS.items()}  # µs
    report = await bench(
        bench_sample.container,
        bench_sample.handler,
        "bench_sample:handler",
        args={"user_id": "u1"},
        calls=3,
        calibration=FIXED,
    )
    # The APP value started once, before the timing, and is reported apart.
    assert [(s["name"], s["scope"]) for s in report["started"]] == [
        ("bench_sample.settings", "APP")
    ]
    assert sleeps["settings"] <= report["started"][0]["us"] < sleeps["settings"] + 100 * MS
    (mode,) = report["modes"]
    assert mode["mode"] == "generated" and mode["calls"] == 3
    rows = by_name(mode)
    assert rows["settings"]["runs_per_call"] == 0  # not part of any timed call
    for name in ("slow", "fast", "connection"):
        assert rows[name]["runs_per_call"] == 1
        assert rows[name]["scope"] == "CALL"
    slow, fast, conn = rows["slow"], rows["fast"], rows["connection"]
    assert sleeps["slow"] <= slow["mean_us"] < sleeps["slow"] + 100 * MS
    assert slow["p99_us"] >= sleeps["slow"]
    assert fast["mean_us"] < sleeps["slow"] / 2  # it does not sleep
    assert sleeps["setup"] <= conn["setup_us"] < sleeps["setup"] + 100 * MS
    assert sleeps["teardown"] <= conn["teardown_us"] < sleeps["teardown"] + 100 * MS
    assert sleeps["body"] <= mode["body"]["mean_us"] < sleeps["body"] + 100 * MS
    parts = mode["user_parts_us"]
    assert parts["resolvers"] >= sleeps["slow"]
    assert parts["setup"] >= sleeps["setup"] and parts["teardown"] >= sleeps["teardown"]
    # The split adds up: your code + resolvent = the call; the parts + remainder = your code.
    assert math.isclose(mode["user_us"] + mode["resolvent_us"], mode["per_call_us"])
    assert math.isclose(sum(parts.values()) + mode["remainder_us"], mode["user_us"])
    slept = sleeps["slow"] + sleeps["setup"] + sleeps["teardown"] + sleeps["body"]
    assert mode["user_us"] >= slept * 0.9  # the rest of a call is small beside the sleeps
    assert report["closed"] == []  # settings has no teardown


async def test_every_step_kind_runs_probed_as_it_runs_plain() -> None:
    # Threaded and inline functions, generators, context managers (sync, async, from an
    # async factory) and a sync body in a thread: set up and torn down once per call, in
    # every mode, probed or not.
    bench_sample.COUNTS.clear()
    bench_sample.THREADS.clear()
    report = await bench(
        bench_sample.container,
        bench_sample.every_kind,
        "bench_sample:every_kind",
        args={"user_id": "u1"},
        modes=MODES,
        calls=4,
        calibration=FIXED,
    )
    counts = bench_sample.COUNTS
    for kind in ("sync_gen", "threaded_gen", "cm", "acm"):
        assert counts[f"{kind} up"] == counts[f"{kind} down"] > 0, kind
    # Each sync teardown where its provider says: inline on the event loop, else in a
    # worker thread, also when closed by hand (the floor).
    threads = bench_sample.THREADS
    assert threads["sync_gen down"] == threads["cm down"] == {"loop"}
    assert threads["threaded_gen down"] == {"worker"}
    assert counts["acm up"] == 2 * counts["body"]  # two async context managers a call
    assert [m["mode"] for m in report["modes"]] == list(MODES)
    for mode in report["modes"]:
        assert all(r["runs_per_call"] == 1 for r in mode["resolvers"]), mode["mode"]
        assert mode["thread_hops"] == 4  # the threaded generator twice, a block, the body
    text = render(report)
    assert "side by side:" in text and "worker-thread hop" in text


async def test_calibration_measures_every_kind() -> None:
    calibration = await calibrate(n=20, rounds=2)
    assert set(calibration.inside) == set(calibration.outside) == {k.name for k in Kind}
    assert all(v >= 0 for v in calibration.inside.values())
    assert calibration.reading > 0


def test_a_run_writes_json_and_reports_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bench.json"
    code, out, err = cli(
        capsys, "bench_sample:trivial", "--calls", "30", "--json", str(path), "--backend", "trio"
    )
    assert code == 0, err
    assert out.startswith("resolvent bench bench_sample:trivial\nplan: 1 step(s) (CALL 1)")
    assert "your code" in out and "resolvent " in out and "unexplained" in out
    assert "The cost of timing was measured in this process and taken off" in out
    data = json.loads(path.read_text())
    (mode,) = data["modes"]
    assert mode["calls"] == 30 and mode["calls_per_second"] > 0
    assert data["plan_bytes"] > 0 and data["compile_us"] > 0
    assert {"inside_ns", "clock_reading_ns"} <= set(data["timing"])


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["bench_sample:needs_value"],
            [
                "parameter 'token' of bench_sample.from_token needs the framework value Token",
                "--override bench_sample:from_token=yourmodule:stand_in",
            ],
        ),
        (
            ["bench_sample:asks"],
            [
                "bench_sample.question asks a question (Elicit)",
                "--override bench_sample:question=yourmodule:answer",
            ],
        ),
        (["bench_sample:handler"], ["needs the call argument 'user_id'", "--arg user_id=VALUE"]),
        (
            ["bench_sample:trivial", "--arg", "nope=1"],
            ["takes no call argument 'nope'", "drop --arg nope=..."],
        ),
    ],
)
def test_what_it_cannot_supply_is_refused_with_the_fix(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: list[str]
) -> None:
    code, out, err = cli(capsys, *argv)
    assert code == 1
    assert out == ""
    assert err.startswith(f"resolvent bench: cannot benchmark {argv[0]}:")
    for text in says:
        assert text in err


def test_a_failing_first_call_is_reported_not_timed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "bench_sample:fails")
    assert code == 1 and out == ""
    assert "the first call of bench_sample:fails failed: ValueError: no database here" in err
    # A question that only shows when the resolver runs is refused then, with the fix.
    code, out, err = cli(capsys, "bench_sample:asks_late")
    assert code == 1 and out == ""
    assert "the first call of bench_sample:asks_late asked a question" in err
    assert "bench_sample.undeclared" in err and "--override" in err


def test_an_override_stands_in_for_the_framework_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(
        capsys,
        "bench_sample:needs_value",
        "--override",
        "bench_sample:from_token=bench_sample:stand_in",
        "--calls",
        "10",
    )
    assert code == 0, err
    assert "bench_sample.stand_in" in out


def test_mcp_tool_and_web_route_are_refused_by_parameter(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("resolvent.mcp")
    pytest.importorskip("fastapi")
    code, _, err = cli(capsys, "graph_sample_mcp:lookup", "--arg", "city='Oslo'")
    assert code == 1
    assert "parameter 'ctx' of graph_sample_mcp.request_id needs the framework value Context" in err
    code, _, err = cli(capsys, "graph_sample_web:starlette_home")
    assert code == 1
    assert "parameter 'request' of graph_sample_web.starlette_home needs the framework" in err
    # A web route's own graph runs: the handler, not the wrapper FastAPI sees.
    code, out, err = cli(
        capsys, "graph_sample_web:fastapi_notes", "--arg", "user_id=u1", "--calls", "10"
    )
    assert code == 0, err
    assert "graph_sample_web.current_user" in out
    assert "graph_sample_web.users (APP)" in out  # started once, reported apart


def test_refusals_are_empty_for_a_runnable_graph() -> None:
    plan = bench_sample.container.compile(bench_sample.handler)
    assert refusals(plan, "h", {"user_id": "u"}) == []


def test_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    code, out, err = cli(capsys, "bench_sample:trivial", "--calls", "20", "--plot", str(path))
    assert code == 0, err
    assert path.read_bytes().startswith(b"\x89PNG")
    assert err.splitlines()[-1] == f"plot written to {path}"
    assert "plot written" not in out


# The run does what the command line asks: the backend, the literal values (42 is a
# number, `a=b` the text after the first `=`), a time per mode; it reports on stdout and
# says on stderr where it wrote the figures, which are the report's, indented.
def test_a_run_on_trio_for_a_time_with_arguments(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("trio")
    path = tmp_path / "bench.json"
    argv = ["bench_sample:on_trio", "--backend", "trio", "--arg", "n=42", "--arg", "note=a=b"]
    code, out, err = cli(capsys, *argv, "--seconds", "0.05", "--json", str(path))
    assert code == 0, err
    assert out.startswith("resolvent bench bench_sample:on_trio\n")
    progress, written = err.splitlines()
    assert progress.startswith("resolvent bench: generated: ") and progress.endswith(" calls")
    assert written == f"figures written to {path}"
    text = path.read_text(encoding="utf-8")
    assert json.loads(text)["args"] == {"n": "42", "note": "'a=b'"}
    assert text == json.dumps(json.loads(text), indent=2)


def test_a_trace_file_it_cannot_read_is_said_after_the_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = cli(capsys, "bench_sample:trivial", "--calls", "1", "--traces", "gone")
    assert code == 1
    assert out.startswith("resolvent bench bench_sample:trivial\n")
    assert err.splitlines()[-1] == (
        "resolvent bench: cannot read the trace file 'gone': No such file or directory"
    )


def test_the_container_named_is_the_one_it_runs_in(capsys: pytest.CaptureFixture[str]) -> None:
    # graph_sample_tools holds two containers: without --container the command would ask.
    code, out, err = cli(
        capsys, "graph_sample_tools:current_user", "--container", "graph_sample_tools:container",
        "--arg", "user_id=u", "--calls", "1",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("resolvent bench graph_sample_tools:current_user\n")


def test_plot_without_matplotlib_is_refused_before_measuring(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    code, out, err = cli(
        capsys, "bench_sample:trivial", "--calls", "20", "--plot", str(tmp_path / "x.png")
    )
    assert code == 2
    assert out == ""  # nothing was measured, so no figure is lost
    assert "--plot needs matplotlib" in err and 'pip install "resolvent[plot]"' in err
    assert not (tmp_path / "x.png").exists()


def test_progress_off_a_terminal_is_one_line_per_mode(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "bench_sample:trivial", "--calls", "200", "--mode", "all")
    assert code == 0, err
    assert err.splitlines() == [f"resolvent bench: {mode}: 200 calls" for mode in MODES]


def test_progress_on_a_terminal_is_one_live_bar() -> None:
    import os
    import pty
    import subprocess

    main_fd, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "resolvent", "bench", "bench_sample:trivial", "--calls", "200"],
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=terminal,
    )
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(main_fd, 4096)
        except OSError:  # the terminal closed: the process has exited
            break
        if not chunk:
            break
        shown += chunk
    out, _ = proc.communicate(timeout=120)
    os.close(main_fd)
    assert proc.returncode == 0
    assert out.startswith(b"resolvent bench bench_sample:trivial")
    text = shown.decode()
    assert "\n" not in text.replace("\r\n", "")  # no line of its own: redrawn in place
    assert "\rresolvent bench: generated [" in text.replace("\r\x1b[K", "\r")
    assert "[########################] 100% (200 calls)" in text
    assert text.endswith("\r\x1b[K")  # cleared when done


def test_a_share_inside_its_own_error_is_reported_as_noise(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bench.json"
    code, _, err = cli(capsys, "bench_sample:trivial", "--calls", "200", "--json", str(path))
    assert code == 0, err
    report = json.loads(path.read_text())
    (mode,) = report["modes"]
    assert mode["resolvent_noise_us"] >= 0  # 10 chunks of 20 calls: an error to compare with
    for share, noise, shown in [
        (-6.2, 8.0, "within measurement noise (±8.00 µs)"),
        (-6.2, 1.0, "within measurement noise (±6.20 µs)"),  # below zero is noise anyway
        (0.5, 0.75, "within measurement noise (±0.75 µs)"),
        (3.0, 0.5, "3.00 µs"),
    ]:
        mode["resolvent_us"], mode["resolvent_noise_us"] = share, noise
        [line] = [ln for ln in render(report).splitlines() if ln.startswith("  resolvent ")]
        assert line.split(None, 1)[1].startswith(shown), line


def test_the_benchmark_agreement_check_runs() -> None:
    # One tiny round: that the check works. Whether it agrees is for a quiet machine.
    pytest.importorskip("anyio")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import anyio
    from benchmarks import bench_check

    results = anyio.run(bench_check.check, 1, 200)
    assert set(results) == {"S1", "S2"}
    for r in results.values():
        assert math.isfinite(r["bench_us"]) and math.isfinite(r["benchmark_us"])
        assert isinstance(r["agrees"], bool)


def test_the_documented_notes_server_commands(capsys: pytest.CaptureFixture[str]) -> None:
    # docs/benchmarks.md: add_note runs; delete_note is refused, then runs with the stand-in.
    pytest.importorskip("resolvent.mcp")
    sys.path.insert(0, str(ROOT))
    try:
        code, out, err = cli(
            capsys, "examples.notes_server.server:add_note", "--arg", "text=hello", "--calls", "20"
        )
        assert code == 0, err
        assert "examples.notes_server.providers.writer (SESSION)" in out
        code, _, err = cli(capsys, "examples.notes_server.server:delete_note", "--arg", "note_id=1")
        assert code == 1
        assert "parameter 'ctx' of examples.notes_server.server.confirm_delete" in err
        assert "examples.notes_server.server.confirm_delete asks a question (Elicit)" in err
        code, out, err = cli(
            capsys,
            "examples.notes_server.server:delete_note",
            "--arg",
            "note_id=1",
            "--override",
            "examples.notes_server.server:confirm_delete="
            "examples.notes_server.bench_stand_ins:keep_the_note",
            "--calls",
            "20",
        )
        assert code == 0, err
        assert "examples.notes_server.bench_stand_ins.keep_the_note  CALL" in out
    finally:
        sys.path.remove(str(ROOT))


async def test_call_timeout_is_off_while_measuring_and_restored() -> None:
    container = bench_sample.container
    container.call_timeout = 30.0
    try:
        report = await bench(
            container, bench_sample.trivial, "t", args={}, calls=10, calibration=FIXED
        )
        assert container.call_timeout == 30.0
    finally:
        container.call_timeout = None
    assert report["call_timeout_ignored"] == 30.0
    assert "call_timeout (30.0 s) was off while measuring" in render(report)
