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


#: the bare process `aggsim explain --json` is compared with: start Python, list the prefix, parse every file,
#: print the earliest one's worker as JSON
FLOOR_PROCESS = MEASURE.replace('if mode == "explain":', "if False:")


def whole_process_seconds(command: list[str]) -> float:
    """Wall time of one whole process, interpreter start to exit, its output piped as in a shell or CI."""
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, timeout=600, cwd=ROOT)
    return time.perf_counter() - started


def measure_processes(prefix: Path, repeats: int) -> tuple[float, float]:
    """End to end, as a person runs it: `aggsim explain PREFIX --json` against the bare process, interleaved so
    drift in machine load hits both alike; the best of each."""
    aggsim = [str(Path(sys.executable).parent / "aggsim"), "explain", str(prefix), "--json"]
    floor = [sys.executable, "-c", FLOOR_PROCESS, "floor", str(prefix)]
    cli, bare = [], []
    for _ in range(repeats):
        cli.append(whole_process_seconds(aggsim))
        bare.append(whole_process_seconds(floor))
    return min(cli), min(bare)


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
        cli_seconds, bare_seconds = measure_processes(prefix, args.repeats)
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
            f"{floor['import_seconds']:.3f} s for flyteidl alone.",
            "",
            "Whole processes, interpreter start to exit, output piped, side by side:",
            "",
            "| | wall time |",
            "|---|---|",
            f"| `aggsim explain PREFIX --json` | {cli_seconds:.3f} s |",
            f"| a bare `python` that lists the prefix and parses every file | {bare_seconds:.3f} s |",
            f"| ratio | {cli_seconds / bare_seconds:.2f}x |",
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
