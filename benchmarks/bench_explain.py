"""Benchmark: `explain` on a local prefix of 10,000 error files, against the floor.

The floor is the least any reader must do: list the directory and parse every file with protobuf.
Each measurement runs in a fresh interpreter (so peak RSS is its own) and is repeated; the best wall
time and the peak RSS of that run are reported. Also reported: the object-store requests propeller
itself would make for the same prefix (list pages of 1000 + one HEAD and one GET per error file).

Run: `make bench` (or `python benchmarks/bench_explain.py [--files N] [--repeats R] [--write-readme]`).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_796_000_000 * 10**9

MEASURE = r"""
import json, os, resource, sys, time
mode, prefix = sys.argv[1], sys.argv[2]
imports_started = time.perf_counter()
if mode == "explain":
    from aggregation.explain import explain_prefix
else:
    from flyteidl.core import errors_pb2
start = time.perf_counter()
if mode == "explain":
    explanation = explain_prefix(prefix, retries=3)
    winner = explanation.error.worker
    requests = explanation.requests
else:
    best = None
    with os.scandir(prefix) as entries:
        names = sorted(e.name for e in entries if e.name.startswith("error") and e.name.endswith(".pb"))
    for name in names:
        doc = errors_pb2.ErrorDocument()
        with open(os.path.join(prefix, name), "rb") as f:
            doc.ParseFromString(f.read())
        ts = doc.error.timestamp.ToNanoseconds()
        if best is None or ts < best[0]:
            best = (ts, doc.error.worker)
    winner, requests = best[1], None
elapsed = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": elapsed, "import_seconds": start - imports_started, "peak_mib": peak_kib / 1024,
                  "winner": winner, "requests": requests}))
"""


def make_prefix(directory: Path, files: int, pods: int) -> None:
    sys.path.insert(0, str(ROOT))
    from aggregation.documents import error_document_bytes

    message = "Traceback (most recent call last):\n" + '  File "train.py", line 42, in step\n' * 20
    for i in range(files):
        pod = i % pods
        data = error_document_bytes(
            code="USER:RuntimeError",
            message=message,
            worker=f"train-worker-{pod}",
            timestamp_ns=T0 + ((i * 7919) % files) * 1_000_000,
        )
        (directory / f"error-{i:032x}.pb").write_bytes(data)


def measure_cli(prefix: Path, repeats: int) -> float:
    """End to end, as a person runs it: `aggsim explain PREFIX --json` (interpreter start included)."""
    aggsim = Path(sys.executable).parent / "aggsim"
    best = None
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([str(aggsim), "explain", str(prefix), "--json"], capture_output=True, check=True, timeout=600)
        elapsed = time.perf_counter() - started
        best = elapsed if best is None else min(best, elapsed)
    return best


def measure(mode: str, prefix: Path, repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", MEASURE, mode, str(prefix)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
            timeout=600,
        )
        runs.append(json.loads(out.stdout))
    return min(runs, key=lambda r: r["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--write-readme", action="store_true", help="replace the figures in README.md")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="aggsim-bench-") as tmp:
        prefix = Path(tmp)
        make_prefix(prefix, args.files, args.pods)
        measure("floor", prefix, 1)  # warm the page cache
        floors, explains = [], []
        for _ in range(args.repeats):  # interleaved, so drift in machine load hits both alike
            floors.append(measure("floor", prefix, 1))
            explains.append(measure("explain", prefix, 1))
        floor = min(floors, key=lambda r: r["seconds"])
        explain = min(explains, key=lambda r: r["seconds"])
        cli_seconds = measure_cli(prefix, args.repeats)
    assert floor["winner"] == explain["winner"], (floor, explain)
    pages = -(-args.files // 1000)
    propeller_requests = 2 * pages + 2 * args.files  # IsError and ReadError each list every page
    ratio = explain["seconds"] / floor["seconds"]
    table = "\n".join(
        [
            f"`explain` on a local prefix of {args.files:,} error files ({args.pods:,} pods), "
            f"best of {args.repeats}, 2 cores:",
            "",
            "| | wall time | peak RSS |",
            "|---|---|---|",
            f"| `explain_prefix` (list, HEAD, GET, parse, pick, decide) | {explain['seconds']:.3f} s "
            f"| {explain['peak_mib']:.0f} MiB |",
            f"| floor: list the directory, parse every file | {floor['seconds']:.3f} s | {floor['peak_mib']:.0f} MiB |",
            f"| ratio | {ratio:.2f}x | |",
            "",
            f"Imports, not in the times above: {explain['import_seconds']:.3f} s for `aggregation.explain`, "
            f"{floor['import_seconds']:.3f} s for flyteidl alone. End to end, `aggsim explain PREFIX --json` "
            f"(interpreter start, imports, JSON) takes {cli_seconds:.2f} s.",
            "",
            f"Object-store requests propeller itself makes for this prefix: 2 x {pages} list pages "
            f"(IsError, then ReadError) + {args.files:,} HEAD + "
            f"{args.files:,} GET = {propeller_requests:,} (the model counts {explain['requests']:,}).",
        ]
    )
    print(table)
    if args.write_readme:
        readme = ROOT / "README.md"
        text = readme.read_text()
        block = f"<!-- bench:explain -->\n{table}\n<!-- /bench:explain -->"
        text, count = re.subn(r"<!-- bench:explain -->.*?<!-- /bench:explain -->", block, text, flags=re.S)
        if count != 1:
            raise SystemExit("README.md has no <!-- bench:explain --> block")
        readme.write_text(text)


if __name__ == "__main__":
    main()
