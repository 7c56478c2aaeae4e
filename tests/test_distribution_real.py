"""Shipped scenarios, run for real again and again, land where the calibrated model says they can.

The prediction for a scenario is its calibrated neighbourhood (`aggregation.neighbourhood`): the scenario
and `PREDICTION_SAMPLES` copies whose events move by up to 0.3 s, whose pods' phases move by up to half their
value (at least 0.3 s: the spread real pods showed between this machine and CI's, README "Timings"), whose
agents look at their workers at any phase of the monitor interval and whose error files get new names, each
simulated. A real run lands in it when its verdict (every field `aggsim run-local` compares: phase, attempts,
each attempt's job condition, decision, winning error and checkpoint resumption) is one of the predicted
verdicts. The test prints, per scenario, what the real runs ended with next to the predicted shares, and how
many runs landed, the repeats apart: a first run must also equal the unjittered simulation (the conformance
tests), which is always in the neighbourhood, so the repeats are the runs that test the distribution.

Runs per scenario: AGGSIM_DISTRIBUTION_RUNS (default 2). The first run of each is the one the conformance tests
check field for field (a session's real runs are shared, `conftest.RealRuns`).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from aggregation.explore import headline

pytestmark = [pytest.mark.plugin, pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(1800)]

RUNS = int(os.environ.get("AGGSIM_DISTRIBUTION_RUNS", "2"))
PREDICTION_SAMPLES = 256
#: the incident under both plugins and Flyte's default reader: the cases whose verdicts the project is about
REPEATED = (
    ("preemption_during_training", "upstream"),
    ("preemption_during_training", "recoverable"),
    ("preemption_during_training_no_aggregation", "recoverable"),
)


def _outcome(key: tuple) -> str:
    fields = dict(key)
    return headline(fields["final_phase"], fields["attempts"])


def _shares(counts: Counter) -> str:
    total = sum(counts.values())
    return ", ".join(f"{name} {n / total:.0%}" for name, n in counts.most_common())


def test_repeated_real_runs_of_shipped_scenarios_land_in_their_calibrated_neighbourhood(real_runs, capsys):
    from conftest import SCENARIOS

    from aggregation.neighbourhood import neighbourhood, verdict_key
    from aggregation.scenario import load_scenario

    report, evidence, landed, total, repeats_landed = [], [], 0, 0, 0
    for scenario, plugin in REPEATED:
        predicted = neighbourhood(load_scenario(str(SCENARIOS / f"{scenario}.textproto"), plugin), PREDICTION_SAMPLES)
        by_outcome = Counter()
        for key, count in predicted.items():
            by_outcome[_outcome(key)] += count
        observed, hits = Counter(), 0
        for index in range(RUNS):
            key = verdict_key(real_runs.get(scenario, plugin, index))
            observed[_outcome(key) + ("" if key in predicted else " (a verdict not predicted)")] += 1
            if key not in predicted:
                run = real_runs.run(scenario, plugin, index)
                evidence.append(f"{scenario} [{plugin}] run {index}: {run.evidence}")
            hits += key in predicted
            repeats_landed += index > 0 and key in predicted
        landed, total = landed + hits, total + RUNS
        report.append(
            f"{scenario} [{plugin}]: {RUNS} real runs: {dict(observed)}; "
            f"predicted over {sum(predicted.values())} calibrated cases: {_shares(by_outcome)}; landed {hits}/{RUNS}"
        )
    repeats = total - len(REPEATED)
    summary = (
        f"{total} real runs of {len(REPEATED)} shipped scenarios: {landed} ({landed / total:.0%}) landed; "
        f"of the {repeats} repeats after each first run, {repeats_landed} landed"
    )
    with capsys.disabled():
        print("\nrepeated real runs against the calibrated neighbourhood:\n" + "\n".join(report) + "\n" + summary)
    assert landed == total, "\n".join(report + evidence)
