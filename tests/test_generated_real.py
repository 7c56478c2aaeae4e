"""Scenarios nobody chose, run for real: a fixed seed's sample of `scenarios(playable=True)` on real pods.

A scenario whose simulated verdict changes when its timings move as real pods' do (`aggregation.neighbourhood`:
events by up to `JITTER_SECONDS`, each pod phase by up to its spread, on a quiet machine, a busy one (`LOAD`) and a
quicker one) is a race, and the real verdict must be one the simulator predicts for that neighbourhood; every
other scenario must agree with the simulator field for field. Either way, as for every shared real run, no pod, agent or
worker may outlive its run and no upload may be read half-written. The seed (AGGSIM_SAMPLE_SEED) and each
scenario's textproto are printed, and written under the test's directory, so a failure can be replayed with
`aggsim run-local`.
"""

from __future__ import annotations

import os
import shutil

import pytest

pytestmark = [pytest.mark.plugin, pytest.mark.real, pytest.mark.generated, pytest.mark.timeout(1800)]

SEED = int(os.environ.get("AGGSIM_SAMPLE_SEED", "20261201"))
SAMPLE_SIZE = 8  # the issue asks for at least 8; each real scenario costs about half a minute of CI
# `make test-real` runs two real tests at once on 2 cores, and their pods' phases slow down: a finished worker group
# to the pod's upload took 5.8 s in CI on 2026-12-03, where the model says 3.2 s and a quiet machine 2.3 s; a sample
# with a preemption 3.6 s after the modelled exit then retried for real. Such a scenario is a race on a busy machine.
LOAD = 3.0


def _played(play, *args):
    """(the execution record, its verdict key), or (None, the neighbourhood's key for the refusal) where the model
    refuses a point a real run can reach: the operator would re-create a deleted pod (`operator.PodRecreation`), or
    the job turned terminal in its first second (`propeller_actor.CreatedInTheSameSecond`), or a SIGTERM meets torch's
    handler after its agent returned (`pods.SignalUnderTorchHandler`)."""
    from aggregation.neighbourhood import refusal_key, verdict_key
    from aggregation.record import execution_to_proto
    from aggregation.scenario import ModelRefusal

    try:
        record = execution_to_proto(play(*args))
    except ModelRefusal as refusal:
        if refusal_key(refusal) is None:
            raise
        return None, refusal_key(refusal)
    return record, verdict_key(record)


def test_a_seeded_sample_of_generated_scenarios_agrees_with_real_pods_or_is_a_predicted_race(tmp_path, capsys):
    from conftest import half_written_uploads, leftover_processes, unpredicted_run_evidence
    from generated_sample import sample
    from google.protobuf import text_format

    from aggregation.kinds import Entrypoint
    from aggregation.neighbourhood import QUICKER_MACHINE, SIGNAL_UNDER_TORCH_HANDLER, neighbourhood
    from aggregation.record import compare
    from aggregation.simulate import simulate
    from aggregation.strategies import spec_of
    from localjob.runner import run_local

    messages = sample(SEED, SAMPLE_SIZE)
    assert len(messages) >= 8
    report, failures, not_run = [], [], []
    for index, message in enumerate(messages):
        message.name = f"sample-{index}"
        path = tmp_path / f"sample-{index}.textproto"
        path.write_text(text_format.MessageToString(message))
        spec = spec_of(message)
        if spec.entrypoint is Entrypoint.INIT_THEN_EXECUTE and shutil.which("tini") is None:
            # the machine's, not the model's: the sample is fixed by its seed, so the rest still runs, and the test
            # ends skipped, saying how many it could not play (`.ci/system-packages` installs tini)
            not_run.append(f"sample-{index}")
            report.append(f"sample-{index} pid1={spec.entrypoint.value}: not run, tini is not installed here")
            continue
        # a quiet machine's races, a busy one's, and a quicker one's (a sample preempted 1.55 s after completion
        # succeeded for real on 2026-12-03, where the quiet and busy neighbourhoods both retry)
        outcomes = neighbourhood(spec) + neighbourhood(spec, load=LOAD) + neighbourhood(spec, fastest=QUICKER_MACHINE)
        run_directory = tmp_path / f"run-{index}"
        # where the operator would re-create a deleted pod the model refuses, simulated or real: a verdict of its own
        simulated, simulated_key = _played(simulate, spec)
        real, real_key = _played(run_local, spec, run_directory)
        # the checks every shared real run gets (conftest.conform): whatever the verdict, no pod, agent or worker
        # outlives the run, and no upload was read half-written
        leftovers = leftover_processes(run_directory)
        half_written = half_written_uploads(real) if real is not None else []
        shape = f"{len(spec.pods)}x{spec.nproc_per_node}{'' if spec.elastic else ' with a master'} {spec.plugin.value}"
        shape += f" aggregation={spec.error_aggregation} pid1={spec.entrypoint.value}"
        kinds = "/".join(",".join(e.kind for e in events) or "-" for events in spec.attempts)
        if len(outcomes) > 1:
            # a copy whose SIGTERM meets torch's handler after its agent returned (upstream) is refused: there the
            # real run may end any of the measured ways (`pods.SignalUnderTorchHandler`), so any verdict is possible
            predicted = real_key in outcomes
            ok = predicted or SIGNAL_UNDER_TORCH_HANDLER in outcomes
            line = f"sample-{index} {shape} [{kinds}]: race ({len(outcomes)} verdicts), real one predicted: {predicted}"
            if ok and not predicted:
                line += " (accepted: a copy's SIGTERM meets torch's handler after its agent returned: refused)"
        elif simulated is None or real is None:
            ok = simulated_key == real_key
            line = f"sample-{index} {shape} [{kinds}]: refused, simulated {simulated_key}, real {real_key}: {ok}"
        else:
            differences = [d for d in compare(simulated, real) if d[1] != d[2]]
            ok = differences == []
            line = f"sample-{index} {shape} [{kinds}]: exact, agrees: {ok}" + ("" if ok else f" {differences}")
        if leftovers:
            ok, line = False, f"{line}; outlived the run: {leftovers}"
        if half_written:
            ok, line = False, f"{line}; read half-written: {half_written}"
        report.append(line)
        if not ok:
            both = simulated is not None and real is not None
            evidence = unpredicted_run_evidence(simulated, real) if both else f"real run kept in {run_directory}"
            failures.append(f"{line} (scenario: {path})\n{evidence}")
    with capsys.disabled():
        print(f"\ngenerated sample, seed {SEED} (AGGSIM_SAMPLE_SEED), scenarios in {tmp_path}:")
        print("\n".join(report))
    assert failures == [], "\n".join(failures)
    if not_run:
        pytest.skip(f"{', '.join(not_run)} not run: their PID 1 is tini, which is not installed here (Debian tini)")
