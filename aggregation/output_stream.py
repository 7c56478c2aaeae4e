"""Our standard output, written whole or not at all.

A reader that goes away in the middle of one large write (`aggsim simulate --json | head -c1`) makes the kernel's
write(2) return the part that fitted in the pipe (64 KiB), and CPython's BufferedWriter hands that short count back
instead of writing the rest: the rest is dropped, no BrokenPipeError is raised and the command exits 0 with its
output cut short (measured with strace: one write(2) returning 65536, then exit 0). Writing until every byte is
out turns that into the broken pipe it is, so the CLI ends it as a SIGPIPE would (exit 141).

A standard output left non-blocking by its parent (some CI runners share their pipe that way) gets EAGAIN when the
pipe is full: that waits until the pipe can take more instead of failing.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import sys
from collections.abc import Iterator


class _WholeWrites(io.RawIOBase):
    """A file descriptor whose `write` returns only when every byte is written (or raises, e.g. EPIPE)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._reader_gone = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        while view and not self._reader_gone:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:
                select.select([], [self._fd], [])
            except BrokenPipeError:
                # raised once, to end the command; what is still buffered then goes nowhere, as into /dev/null,
                # so no later flush (the block's end, the interpreter's exit) prints "Exception ignored"
                self._reader_gone = True
                raise
        return total


def _real_stdout_fd() -> int | None:
    """The process's own standard output, not a caller's replacement (pytest's capture, click's CliRunner)."""
    if sys.stdout is not sys.__stdout__ or sys.stdout is None:
        return None
    try:
        return sys.stdout.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return None


@contextlib.contextmanager
def whole_writes() -> Iterator[None]:
    """Within the block, `sys.stdout` writes whole; the caller's stream is back (and flushed into) afterwards."""
    fd = _real_stdout_fd()
    if fd is None:
        yield
        return
    previous = sys.stdout
    previous.flush()
    stream = io.TextIOWrapper(
        io.BufferedWriter(_WholeWrites(fd)),
        encoding=previous.encoding,
        errors=previous.errors,
        line_buffering=previous.line_buffering,
    )
    sys.stdout = stream
    try:
        yield
    finally:
        sys.stdout = previous  # closing `stream` never closes the descriptor: it is the process's, not ours
        # flushed however the command ended (`sys.exit(1)` too), and a failure here (the reader gone, a full disk)
        # is the command's, as any other write's: left to the stream's deallocation, it would print "Exception
        # ignored" and the command would exit with its own status, as if its whole answer had been written
        stream.flush()
