"""A pod on a node whose clock is off also reads its files' times on that clock (`localjob.pod.clock_offset_environment`
puts this directory first on the pod's PYTHONPATH, so every Python process of the pod, agent and workers, imports it).

libfaketime shifts the clocks a pod's processes read, and the file times the C library's `stat` returns; but CPython
reads file times through `stat64`, `lstat64` and `fstat64`, which libfaketime 0.9.10 does not wrap, so a pod saw its
own files' times on the true clock: measured, a file written under FAKETIME=+100 read back with an mtime 100 s before
`time.time()`. On a real node the kernel stamps a file from the same skewed clock the processes read. It matters to the
recoverable plugin, which stamps a worker's failure with its error file's mtime (`plugin/task.py`
`refine_first_failure_timestamp`).

So `os.stat`, `os.lstat` and `os.fstat` (and what reads through them: `os.path.getmtime`, `pathlib`, fsspec's local
`info`) shift the times they return by the node's offset, and `os.utime` takes times on the node's clock back to the
true one (libfaketime writes its own "now" for a `touch`, which would otherwise be shifted twice). Not shifted: an
`os.scandir` entry's cached `stat()`, which is C code.

Python imports one `sitecustomize`, the first on its path: this one, put first, would shadow the one the pod's image
already has (a distribution's, such as Ubuntu's apport hook, or the image's own). So it then runs that one, which
takes its place as the `sitecustomize` module, as it would on a node whose clock is right.
"""

import functools
import importlib.machinery
import importlib.util
import os
import sys
import time


def _shifted(result: os.stat_result, offset_ns: int) -> os.stat_result:
    """`result` with its access, modification and change times moved by `offset_ns`, each field as CPython fills it
    (`posixmodule.c` `fill_time`: whole seconds, seconds + nanoseconds * 1e-9, nanoseconds)."""
    visible, named = result.__reduce__()[1]
    visible, named = list(visible), dict(named)
    for index, name in ((7, "st_atime"), (8, "st_mtime"), (9, "st_ctime")):
        seconds, nanoseconds = divmod(named[f"{name}_ns"] + offset_ns, 10**9)
        visible[index] = seconds
        named[name] = seconds + nanoseconds * 1e-9
        named[f"{name}_ns"] = seconds * 10**9 + nanoseconds
    return os.stat_result(visible, named)


def _replace(name: str, wrapper) -> None:
    """`os.<name>` becomes `wrapper`, which also takes its place in the `os.supports_*` sets (shutil and others ask
    them whether a function takes a descriptor or a directory descriptor, or can leave symlinks alone)."""
    original = getattr(os, name)
    functools.update_wrapper(wrapper, original)
    for supports in (os.supports_dir_fd, os.supports_fd, os.supports_follow_symlinks, os.supports_effective_ids):
        if original in supports:
            supports.add(wrapper)
    setattr(os, name, wrapper)


def _install() -> None:
    offset = os.environ.get("AGGSIM_NODE_CLOCK_OFFSET_NS")
    if not offset:
        return
    offset_ns = int(offset)
    for name in ("stat", "lstat", "fstat"):
        read = getattr(os, name)
        _replace(name, lambda *args, _read=read, **kwargs: _shifted(_read(*args, **kwargs), offset_ns))
    write = os.utime

    def utime(path, times=None, *, ns=None, **kwargs):
        if times is None and ns is None:
            now = time.time_ns()  # the node's clock
            ns = (now, now)
        if times is not None:
            return write(path, tuple(t - offset_ns / 1e9 for t in times), **kwargs)
        return write(path, ns=tuple(t - offset_ns for t in ns), **kwargs)

    _replace("utime", utime)


def _run_the_shadowed_sitecustomize() -> None:
    here = os.path.dirname(os.path.realpath(__file__))
    rest = [entry for entry in sys.path if os.path.realpath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.realpath(spec.origin or "") == os.path.realpath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_install()
_run_the_shadowed_sitecustomize()
