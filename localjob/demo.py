"""The main job: the preemption incident, for real, with the upstream plugin and with ours.

One pod (the real `pyflyte-execute`, an elastic agent with 2 gloo workers) trains; once the workers
are past their first barrier, we play the kubelet and SIGTERM the pod, as a spot preemption does. We
do it twice, with flytekit's plugin as released and with this project's, then read what each pod left
in its output prefix with the `aggregation` package, exactly as propeller would.
"""

from __future__ import annotations

import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from aggregation.explain import Explanation, explain_prefix, rfc3339_nanos
from aggregation.propeller import JobCondition
from aggregation.report import fits, literal, rule
from localjob.blobstore import is_partial
from localjob.pod import LocalPod, PodSpec
from localjob.realpods import LocalJobError
from localjob.workloads import Workload

RETRIES = 2  # the demo task is declared with `retries=2`
POD_TIMEOUT = 90


@dataclass(frozen=True)
class PreemptedRun:
    variant: str
    exit_code: int
    signal_sent_at: float
    exited_after: float
    files: tuple[str, ...]
    explanation: Explanation


def preempt_one_pod(variant: str, work_dir: Path) -> PreemptedRun:
    """Start one pod of `variant`, SIGTERM it once training is under way, return what it left."""
    events = work_dir / "events"
    events.mkdir(parents=True)
    prefix = work_dir / "outputs"
    spec = PodSpec(
        name="train-worker-0",
        task_args=tuple(Workload(variant, "spawn", "1", 2).loader_args()),
        output_prefix=prefix,
        extra_env={"AGGSIM_EVENTS_DIR": str(events)},
    )
    with LocalPod(spec, work_dir / "work") as pod:
        deadline = time.monotonic() + POD_TIMEOUT
        while not all((events / f"barrier.{rank}").exists() for rank in (0, 1)):
            if pod.returncode is not None or time.monotonic() > deadline:
                last = (pod.log().strip().splitlines() or ["(no output)"])[-1][:200]
                raise LocalJobError(f"the {variant} pod never started training: {last}")
            time.sleep(0.05)
        time.sleep(0.5)  # a little training
        sent = pod.send_signal(signal.SIGTERM)
        code = pod.wait(timeout=POD_TIMEOUT)
        exited_after = time.time() - sent
    files = tuple(sorted(p.name for p in prefix.rglob("*") if p.is_file() and not is_partial(p.name)))
    return PreemptedRun(variant, code, sent, exited_after, files, explain_prefix(str(prefix), retries=RETRIES))


def _error_summary(run: PreemptedRun) -> Text:
    error = run.explanation.error
    if error is None:
        return Text("none")
    delta = (error.timestamp_ns / 1e9 - run.signal_sent_at) if error.timestamp_ns is not None else None
    stamp = rfc3339_nanos(error.timestamp_ns)
    when = f"{stamp}\n({delta:+.3f} s from the SIGTERM)" if delta is not None else "no timestamp"
    return literal(
        f"{error.code}\nkind {error.kind}, {'recoverable' if error.recoverable else 'NOT recoverable'}\n"
        f"worker {error.worker or '-'}\n{when}"
    )


def _verdict(run: PreemptedRun) -> Text:
    decision = run.explanation.decision.decision.value
    phase = run.explanation.outcome.phase.value
    if decision == "SUCCEED":
        return Text.assemble(
            (f"{phase} -> node SUCCEEDS", "bold red"), " silently: no outputs, no checkpoint, retries never fire"
        )
    if decision == "RETRY":
        return Text.assemble(
            (f"{phase} -> node RETRIES", "bold green"), ": attempt 2 resumes from attempt 1's checkpoint"
        )
    return literal(f"{phase} -> node {decision} ({run.explanation.decision.code})")


LABELS = {"upstream": "flytekitplugins-kfpytorch 1.16 (upstream)", "recoverable": "plugin.Elastic (this project)"}


def render(runs: list[PreemptedRun], console: Console) -> None:
    """A table, one column per plugin, when it fits the console unbroken; else one block per plugin."""
    title = "A spot preemption SIGTERMs a training pod"
    rows: list[tuple[str, list[Text]]] = [
        ("pod exit code", [Text(f"{r.exit_code} ({r.exited_after:.1f} s after SIGTERM)") for r in runs]),
        (
            "files in the output prefix",
            [literal("\n".join(r.files)) if r.files else Text("(empty)", style="red") for r in runs],
        ),
        ("error propeller reads\n(earliest strategy)", [_error_summary(r) for r in runs]),
        (
            "training operator",
            [Text(f"job {JobCondition.SUCCEEDED.value} (an elastic job succeeds when one pod exits 0)") for _ in runs],
        ),
        (f"propeller (task retries={RETRIES})", [_verdict(r) for r in runs]),
    ]
    columns = [[label for label, _ in rows]] + [
        [LABELS[run.variant], *(cells[i] for _, cells in rows)] for i, run in enumerate(runs)
    ]
    if fits(console, columns):
        table = Table(title=title, show_lines=True)
        table.add_column("", style="bold")
        for run in runs:
            table.add_column(LABELS[run.variant], no_wrap=True)
        for label, cells in rows:
            table.add_row(label, *cells)
        console.print(table)
        return
    console.print(Text(title, style="bold"))  # narrow terminal or a pipe: one block per plugin, nothing cut
    for i, run in enumerate(runs):
        rule(console, LABELS[run.variant])
        for label, cells in rows:
            console.print(Text(label.replace("\n", " ") + ":", style="bold"))
            for line in cells[i].split("\n"):
                console.print(Text.assemble("    ", line), highlight=False)


def run_demo(console: Optional[Console] = None, work_dir: Optional[Path] = None) -> list[PreemptedRun]:
    console = console or Console()
    console.print(
        Panel(
            "PyTorch elastic training on Flyte runs as a PyTorchJob. When spot capacity is reclaimed, the kubelet "
            "SIGTERMs the pod. flytekit's kfpytorch plugin turns torch's SignalException into IgnoreOutputs: the pod "
            "writes nothing and exits 0, the job counts as Succeeded, and the run ends green with no outputs and no "
            "checkpoint. This project's plugin raises a recoverable error stamped when the signal arrived, so Flyte "
            "retries and the next attempt resumes from the last checkpoint.\n\n"
            "Below: one real pod (pyflyte-execute, a torch elastic agent, 2 gloo workers) is preempted twice, once "
            "with each plugin; then the pod's output prefix is read the way propeller reads it.",
            title="flyte-aggsim demo",
        )
    )
    runs = []
    with tempfile.TemporaryDirectory(prefix="aggsim-demo-") as tmp:
        base = Path(work_dir) if work_dir else Path(tmp)
        for variant in ("upstream", "recoverable"):
            with console.status(f"running the {variant} plugin's pod and preempting it..."):
                runs.append(preempt_one_pod(variant, base / variant))
    render(runs, console)
    return runs
