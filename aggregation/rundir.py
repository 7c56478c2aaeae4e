"""The directory of a real run (`run-local`, `demo --real`, `calibrate`): what it holds, what is kept, and
that nothing of the run lands anywhere else.

Inside it, `tmp/` is the `TMPDIR` of this process, so what flytekit and torch leave in a temp directory goes
there and is removed with it. Each pod has a `/tmp` of its own beside its log (`localjob.pod.LocalPod.tmp_dir`), as
a container has: its flytekit sandboxes, torch elastic's `torchelastic_*` dirs and a failed worker's
`pytorch-errorfile-*` traceback. That and the rest is evidence (pod logs, output prefixes, checkpoints): removed at
the end unless the user gave the directory, asked to keep it, or the run disagreed or failed (`keep`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional


class RunDirError(ValueError):
    """The run's directory cannot be used; the message is one line naming it."""


class RunDir:
    """`prepare()` (or entering) makes the directory; leaving cleans up. `path` is the run's directory."""

    def __init__(
        self, work_dir: Optional[str] = None, force: bool = False, keep: bool = False, prefix: str = "aggsim-"
    ) -> None:
        self.given = Path(work_dir) if work_dir else None
        self.force = force
        self.kept = keep or self.given is not None
        self.prefix = prefix
        self.path: Optional[Path] = None
        self._saved: Optional[tuple[Optional[str], Optional[str]]] = None

    def __enter__(self) -> "RunDir":
        if self.path is None:
            self.prepare()
        return self

    def prepare(self) -> None:
        """Make the directory and point temp files into it; RunDirError if a given one cannot be used."""
        if self.given is not None:
            self._prepare_given(self.given)
            self.path = self.given
        else:
            self.path = Path(tempfile.mkdtemp(prefix=self.prefix))
        tmp = self.path / "tmp"
        tmp.mkdir()
        self._saved = (os.environ.get("TMPDIR"), tempfile.tempdir)
        os.environ["TMPDIR"] = str(tmp)
        tempfile.tempdir = str(tmp)

    def _prepare_given(self, path: Path) -> None:
        try:
            if path.exists() and not path.is_dir():
                raise RunDirError(f"--work-dir {path}: not a directory")
            if path.is_dir() and any(path.iterdir()):
                if not self.force:
                    raise RunDirError(
                        f"--work-dir {path}: not empty (an earlier run's files would mix into this one's); "
                        "pass --force to empty it first"
                    )
                for entry in path.iterdir():
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunDirError(f"--work-dir {path}: cannot use it: {e.strerror or e}") from None

    def keep(self) -> None:
        """Keep the evidence: the run disagreed with the simulator, or failed."""
        self.kept = True

    def discard(self) -> None:
        """Nothing ran, so there is nothing to keep: a temp directory goes even with `--keep` (a given one stays)."""
        self.kept = self.given is not None

    def __exit__(self, *exc_info: object) -> None:
        if self._saved is not None:
            environ_tmpdir, tempfile.tempdir = self._saved
            if environ_tmpdir is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = environ_tmpdir
        if self.path is None:
            return
        # never evidence: this process's scratch (flytekit's and torch's); each pod's own /tmp is beside its log
        shutil.rmtree(self.path / "tmp", ignore_errors=True)
        if not self.kept:
            shutil.rmtree(self.path, ignore_errors=True)
