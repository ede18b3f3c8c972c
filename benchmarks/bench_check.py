"""Does ``resolvent bench`` report the overhead ``benchmarks/`` measures?

``python -m benchmarks.bench_check [--rounds N] [--calls N]`` builds the S1 and S2 graphs
exactly as the benchmark does, and in each round measures, one after the other in this
process: the hand-written implementation and resolvent's with the benchmark's own timed
batches (overhead = resolvent - hand-written), then ``resolvent bench``'s report of the
same container and handler (its "resolvent" share). It prints the median of each over the
rounds and the median of the rounds' ratios, and exits 1 if that ratio is off 1 by more
than 25%.

Why not a test: both figures are fractions of a microsecond, so any load on the machine
moves them. Interleaving the two in one process and comparing medians keeps the ratio
steady, but an assertion on it would still fail on a busy CI runner; run this on a quiet
machine, as the benchmarks themselves. The test suite runs it with one tiny round to
check that it works, and asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from typing import Any

import anyio

from resolvent._tools.bench import bench

from . import graphs, impls
from .graphs import USER_ID
from .runner import _batch

TOLERANCE = 0.25


async def check(rounds: int, calls: int) -> dict[str, Any]:
    """The medians per scenario: benchmark overhead, bench's figure, and their ratio."""
    out: dict[str, Any] = {}
    for key, graph in (("S1", graphs.single()), ("S2", graphs.diamond())):
        async with contextlib.AsyncExitStack() as stack:
            hand = await impls.handwritten(graph, stack)
            resolvent = await impls.resolvent(graph, stack)
            container, handler, _ = impls.resolvent_setup(graph)
            measured: list[float] = []
            reported: list[float] = []
            for _ in range(rounds):
                took_hand = await _batch(hand.once, calls) / calls
                took_resolvent = await _batch(resolvent.once, calls) / calls
                measured.append((took_resolvent - took_hand) / 1000)
                report = await bench(
                    container, handler, key, args={"user_id": USER_ID}, calls=calls
                )
                reported.append(report["modes"][0]["resolvent_us"])
            bench_us = statistics.median(reported)
            benchmark_us = statistics.median(measured)
            # Each round's two figures were measured a moment apart: their ratio drifts
            # less with the machine's load than the ratio of the two medians.
            ratio = statistics.median(
                b / m if m > 0 else float("inf") for b, m in zip(reported, measured, strict=True)
            )
            out[key] = {
                "benchmark_us": benchmark_us,
                "bench_us": bench_us,
                "ratio": ratio,
                "agrees": abs(ratio - 1) <= TOLERANCE,
                "rounds": rounds,
                "calls": calls,
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_check")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    parser.add_argument("--calls", type=int, default=20_000, help="calls per measurement")
    args = parser.parse_args(argv)
    results = anyio.run(check, args.rounds, args.calls)
    ok = True
    for key, r in results.items():
        verdict = "agrees" if r["agrees"] else "DIFFERS"
        print(
            f"{key}: benchmarks/ overhead {r['benchmark_us']:.3f} µs, resolvent bench "
            f"{r['bench_us']:.3f} µs, ratio {r['ratio']:.2f} ({verdict} within "
            f"{TOLERANCE:.0%}; medians of {r['rounds']} rounds, the ratio of each round's pair)"
        )
        ok = ok and r["agrees"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
