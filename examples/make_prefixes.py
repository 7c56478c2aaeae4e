"""Write the sample output prefixes the docs use (run from the repository root; a test checks them).

- `prefixes/preempted_pair/`: two pods with `_F_DES=Earliest`: the preempted pod's recoverable error
  (this project's plugin, stamped at the SIGTERM) and the survivor's consequential error 45 ms later.
- `prefixes/bad_files/`: what a careless plugin leaves: no timestamp, no worker, a temp name.
"""

from pathlib import Path

from aggregation.documents import error_document_bytes

HERE = Path(__file__).resolve().parent
T = 1_796_013_731 * 10**9  # 2026-11-30T04:42:11Z


def main() -> None:
    pair = HERE / "prefixes" / "preempted_pair"
    pair.mkdir(parents=True, exist_ok=True)
    (pair / "error-3f1c2a9e5b7d4c6a8e0f1b2c3d4e5f60.pb").write_bytes(
        error_document_bytes(
            code="USER:Recoverable",
            recoverable=True,
            worker="train-worker-1",
            timestamp_ns=T + 368_224_620,
            message="The elastic agent received SIGTERM; the worker group was terminated before it finished",
        )
    )
    (pair / "error-a07e9d1c3b5f4e2a8c6d0b1a2f3e4d5c.pb").write_bytes(
        error_document_bytes(
            code="USER:RuntimeError",
            worker="train-worker-0",
            timestamp_ns=T + 413_051_002,
            message="RuntimeError: Connection reset by peer",
        )
    )
    bad = HERE / "prefixes" / "bad_files"
    bad.mkdir(parents=True, exist_ok=True)
    (bad / "error-0d9e.pb").write_bytes(
        error_document_bytes(code="USER:Recoverable", recoverable=True, message="preempted", worker="train-worker-1")
    )
    (bad / "error-77aa.pb").write_bytes(error_document_bytes(code="USER:RuntimeError", message="boom", timestamp_ns=T))
    (bad / "error.pb.tmp").write_bytes(
        error_document_bytes(code="USER:RuntimeError", message="half-written", worker="train-worker-0", timestamp_ns=T)
    )


if __name__ == "__main__":
    main()
