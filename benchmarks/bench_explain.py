"""Benchmark: `explain` on a local prefix of 10,000 error files, against the floor.

The floor is the least any reader must do: list the directory and parse every file with protobuf.
Each measurement runs in a fresh interpreter (so peak RSS is its own) and is repeated; the best wall
time and the peak RSS of that run are reported. Also reported: the object-store requests propeller
itself would make for the same prefix (a HEAD of futures.pb, list pages of 1000 + one HEAD and one GET per error
file).

Whole processes, side by side: `aggsim explain --json`, the bare process, and a bare process that makes
propeller's requests, alone and printing the same files as `aggsim` (checked): the last two split the gap into
what propeller's requests and the output cost and what the tool costs.

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


#: propeller's requests without the tool: list `error*` twice (IsError, then ReadError), HEAD then GET and parse
#: every `.pb` key, print the earliest one's worker and, with `files`, every file as `explain --json` does. What
#: `aggsim explain --json` costs beyond this is the tool's; what this costs beyond the bare process is propeller's
#: requests and the output's.
SAME_REQUESTS_PROCESS = r"""
import json, os, sys, time
from flyteidl.core import errors_pb2, execution_pb2
prefix, print_files = sys.argv[1], sys.argv[2] == "files"
ORIGIN = {value: name for name, value in execution_pb2.ExecutionError.ErrorKind.items()}
RECOVERABLE = errors_pb2.ContainerError.RECOVERABLE


def listing():
    with os.scandir(prefix) as entries:
        return sorted(e.name for e in entries if e.name.startswith("error") and e.is_file())


# invokePlugin's HEAD of futures.pb, then IsError's HEADs: timed for their cost, their answer unused (no futures
# file, and no file here is over the limit)
os.path.exists(os.path.join(prefix, "futures.pb"))
sizes = {name: os.stat(os.path.join(prefix, name)).st_size for name in listing() if name.endswith(".pb")}
files, best = [], None
for name in (n for n in listing() if n.endswith(".pb")):
    doc = errors_pb2.ErrorDocument()
    with open(os.path.join(prefix, name), "rb") as f:
        doc.ParseFromString(f.read())
    error = doc.error
    seconds, nanos = error.timestamp.seconds, error.timestamp.nanos
    if best is None or seconds * 10**9 + nanos < best[0]:
        best = (seconds * 10**9 + nanos, name, error.worker)
    if print_files:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"
        files.append({"path": name, "timestamp": stamp, "code": error.code, "kind": ORIGIN[error.origin],
                      "recoverable": error.kind == RECOVERABLE, "worker": error.worker, "selected": False,
                      "problem": None})
for file in files:
    file["selected"] = file["path"] == best[1]
sys.stdout.write(json.dumps({"files": files if print_files else None, "winner": best[2]}))
"""


def whole_process_seconds(command: list[str]) -> float:
    """Wall time of one whole process, interpreter start to exit, its output piped as in a shell or CI."""
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, timeout=600, cwd=ROOT)
    return time.perf_counter() - started


def measure_processes(prefix: Path, repeats: int) -> dict[str, float]:
    """End to end, as a person runs it: `aggsim explain PREFIX --json`, propeller's requests alone, the same and
    the same files printed, and the bare process, interleaved so drift in machine load hits all alike; the best of
    each. aggsim and the process that prints the same files must print the same files."""
    commands = {
        "aggsim": [str(Path(sys.executable).parent / "aggsim"), "explain", str(prefix), "--json"],
        "requests": [sys.executable, "-c", SAME_REQUESTS_PROCESS, str(prefix), "winner"],
        "requests and files": [sys.executable, "-c", SAME_REQUESTS_PROCESS, str(prefix), "files"],
        "bare": [sys.executable, "-c", FLOOR_PROCESS, "floor", str(prefix)],
    }
    files = [
        json.loads(subprocess.run(commands[name], capture_output=True, check=True, timeout=600).stdout)["files"]
        for name in ("aggsim", "requests and files")
    ]
    assert files[0] == files[1], "the process that makes propeller's requests prints other files than aggsim"
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, command in commands.items():
            seconds[name].append(whole_process_seconds(command))
    return {name: min(times) for name, times in seconds.items()}


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
        processes = measure_processes(prefix, args.repeats)
    assert floor["winner"] == explain["winner"], (floor, explain)
    pages = -(-args.files // 1000)
    # the HEAD of futures.pb before ValidateOutput; IsError and ReadError each list every page
    propeller_requests = 1 + 2 * pages + 2 * args.files
    ratio = explain["seconds"] / floor["seconds"]

    def ratio_of(name: str) -> str:
        return f"{processes[name] / processes['bare']:.2f}x"

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
            "| | wall time | ratio to the bare process |",
            "|---|---|---|",
            f"| `aggsim explain PREFIX --json` | {processes['aggsim']:.3f} s | {ratio_of('aggsim')} |",
            f"| a bare `python` that lists the prefix and parses every file | {processes['bare']:.3f} s | 1.00x |",
            f"| a bare `python` that makes propeller's requests (two listings, a HEAD and a GET per file) "
            f"| {processes['requests']:.3f} s | {ratio_of('requests')} |",
            f"| the same, printing every file as `explain --json` does | {processes['requests and files']:.3f} s "
            f"| {ratio_of('requests and files')} |",
            "",
            f"`aggsim explain --json` against the last of these, which does the same requests and prints the same "
            f"files without the tool: {processes['aggsim'] / processes['requests and files']:.2f}x.",
            "",
            f"Object-store requests propeller itself makes for this prefix: a HEAD of futures.pb + 2 x {pages} list "
            f"pages (IsError, then ReadError) + {args.files:,} HEAD + "
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
