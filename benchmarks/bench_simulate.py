"""Benchmark: simulated executions per second, and how one execution's cost grows with pods and attempts.

- The seed scenario (`scenarios/preemption_during_training.textproto`, 2 pods, 2 attempts), one process,
  then one process per core.
- Pods: the same preemption with 2 to 1,000 pods (one attempt each way: the retry runs clean).
- Attempts: every attempt preempted, `retries` = attempts - 1.
- The demo's two sweeps (`aggsim demo`), in one process and in one worker process per core (`sweep(processes=N)`),
  side by side.

Run: `make bench` (or `python benchmarks/bench_simulate.py [--seconds S] [--write-readme]`).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aggregation.scenario import parse_scenario  # noqa: E402
from aggregation.simulate import simulate  # noqa: E402

SEED_SCENARIO = ROOT / "scenarios" / "preemption_during_training.textproto"


def rate(spec, seconds: float) -> float:
    """Executions per second, best of three windows."""
    best = 0.0
    for _ in range(3):
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds / 3:
            simulate(spec)
            count += 1
        best = max(best, count / (time.perf_counter() - started))
    return best


def _worker(args) -> int:
    text, seconds = args
    spec = parse_scenario(text, str(SEED_SCENARIO))
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        simulate(spec)
        count += 1
    return count


def all_cores_rate(text: str, seconds: float) -> tuple[float, int]:
    cores = os.cpu_count() or 1
    with multiprocessing.get_context("spawn").Pool(cores) as pool:
        pool.map(_worker, [(text, 0.2)] * cores)  # warm up every process
        started = time.perf_counter()
        counts = pool.map(_worker, [(text, seconds)] * cores)
        elapsed = time.perf_counter() - started
    return sum(counts) / elapsed, cores


def scenario_with(pods: int, attempts: int) -> str:
    names = " ".join(f'pods: "train-worker-{i}"' for i in range(pods))
    preempted = "\n".join(
        "attempts { events { at_seconds: 10 checkpoint {} } "
        'events { at_seconds: 30.6 pod: "train-worker-1" preemption {} } }'
        for _ in range(attempts)
    )
    return (
        f'name: "bench" plugin: RECOVERABLE seed: 1 job {{ {names} nproc_per_node: 2 }} '
        f"task {{ retries: {attempts} training_seconds: 120 }} "
        "propeller { error_aggregation: true observation_delay_seconds: 1 } "
        f"timings {{ failure_detection_seconds: 1.5 }} {preempted}"
    )


def demo_sweeps_seconds(processes: int) -> tuple[float, int]:
    """Wall time of the demo's two sweeps, and how many simulations they make."""
    from aggregation.cli import DEMO_SAMPLES
    from aggregation.explore import default_variations, sweep
    from aggregation.scenario import read_scenario

    started, simulations = time.perf_counter(), 0
    for name in ("preemption_during_training", "sibling_user_error_cleanup"):
        source = read_scenario(name)
        result = sweep(source, default_variations(source), samples=DEMO_SAMPLES, seed=0, processes=processes)
        simulations += sum(cell.total for cell in result.cells)
    return time.perf_counter() - started, simulations


def micros_per_execution(text: str, seconds: float) -> float:
    return 1e6 / rate(parse_scenario(text), seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per figure")
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()

    text = SEED_SCENARIO.read_text()
    single = rate(parse_scenario(text, str(SEED_SCENARIO)), args.seconds)
    multi, cores = all_cores_rate(text, args.seconds)
    pod_rows = [(n, micros_per_execution(scenario_with(n, 1), args.seconds / 2)) for n in (2, 10, 100, 1000)]
    attempt_rows = [(k, micros_per_execution(scenario_with(2, k), args.seconds / 2)) for k in (1, 2, 4, 8)]
    alone, simulations = demo_sweeps_seconds(1)
    shared, _ = demo_sweeps_seconds(cores)

    lines = [
        f"The seed scenario (2 pods, 2 attempts): **{single:,.0f} executions/s** on one core, "
        f"**{multi:,.0f} executions/s** with {cores} processes on {cores} cores.",
        "",
        "| pods (1 preempted, then 1 clean retry) | µs per execution | µs per pod |",
        "|---|---|---|",
        *(f"| {n:,} | {us:,.0f} | {us / n:,.1f} |" for n, us in pod_rows),
        "",
        "| attempts (each preempted), 2 pods | µs per execution | µs per attempt |",
        "|---|---|---|",
        *(f"| {k} | {us:,.0f} | {us / (k + 1):,.0f} |" for k, us in attempt_rows),
        "",
        f"`aggsim demo`'s two sweeps ({simulations:,} cases, points x plugin x aggregation): **{alone:.1f} s** in one "
        f"process, **{shared:.1f} s** with {cores} worker processes ({alone / shared:.2f}x).",
    ]
    table = "\n".join(lines)
    print(table)
    if args.write_readme:
        readme = ROOT / "README.md"
        block = f"<!-- bench:simulate -->\n{table}\n<!-- /bench:simulate -->"
        text, count = re.subn(
            r"<!-- bench:simulate -->.*?<!-- /bench:simulate -->", block, readme.read_text(), flags=re.S
        )
        if count != 1:
            raise SystemExit("README.md has no <!-- bench:simulate --> block")
        readme.write_text(text)


if __name__ == "__main__":
    main()
