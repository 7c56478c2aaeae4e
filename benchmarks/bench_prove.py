"""Benchmark: `aggsim prove` on the seed scenario with six varied fields, per plugin and aggregation flag.

The box is the demo's sweep ranges for six continuous fields: the signal's arrival (widened to its whole second),
the worker group's shutdown (0.03-30 s, up to the grace period's SIGKILL), the upload, the failure detection,
propeller's look and the second pod's clock offset; the claim is `retries`. Each proof runs in this one process,
on one core; the time is the proof's own (z3 and the concolic runs), the paths how many it explored.

Run: `make bench` (or `python benchmarks/bench_prove.py [--write-readme]`).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aggregation.prove import parse_claim, parse_range, prove  # noqa: E402
from aggregation.scenario import read_scenario  # noqa: E402

BOX = (
    "attempts[0].events[1].at_seconds=30..31",
    "timings.agent_shutdown_seconds=0.03..30",
    "timings.upload_seconds=0.05..3",
    "timings.failure_detection_seconds=1.2..2.1",
    "propeller.observation_delay_seconds=0..10",
    "pod_timings[0].timings.clock_offset_seconds=-0.25..0.25",
)
TARGET_SECONDS = 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()

    source = read_scenario("preemption_during_training")
    ranges = [parse_range(v, source.message) for v in BOX]
    claim = parse_claim("retries", source.message)
    rows = []
    for plugin in ("upstream", "seed-pr", "recoverable"):
        for flag in (True, False):
            started = time.perf_counter()
            proof = prove(source, claim, ranges, plugin, flag, max_paths=100_000, max_seconds=3600)
            rows.append((plugin, flag, proof.verdict, len(proof.paths), time.perf_counter() - started))
            print(
                f"{plugin:<12} {'on' if flag else 'off':<4} {rows[-1][2]:<15} {rows[-1][3]:>6,} paths"
                f" {rows[-1][4]:6.1f} s",
                flush=True,
            )
    slowest = max(r[4] for r in rows)
    lines = [
        "`aggsim prove preemption_during_training --claim retries` over six fields ("
        + ", ".join(f"`{v}`" for v in BOX)
        + "), each proof in turn in one process, on one core:",
        "",
        "| plugin | aggregation | answer | paths | seconds |",
        "|---|---|---|---|---|",
        *(f"| {p} | {'on' if f else 'off'} | {v} | {n:,} | {s:.1f} |" for p, f, v, n, s in rows),
        "",
        f"Slowest: {slowest:.1f} s (target: under {TARGET_SECONDS} s on 2 cores; "
        f"{'met on one' if slowest < TARGET_SECONDS else 'missed'}).",
    ]
    table = "\n".join(lines)
    print(table)
    if args.write_readme:
        readme = ROOT / "README.md"
        block = f"<!-- bench:prove -->\n{table}\n<!-- /bench:prove -->"
        text, count = re.subn(r"<!-- bench:prove -->.*?<!-- /bench:prove -->", block, readme.read_text(), flags=re.S)
        if count != 1:
            raise SystemExit("README.md has no <!-- bench:prove --> block")
        readme.write_text(text)


if __name__ == "__main__":
    main()
