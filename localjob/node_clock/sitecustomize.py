"""A pod on a node whose clock is off also reads its files' times on that clock (`localjob.pod.clock_offset_environment`
puts this directory first on the pod's PYTHONPATH, so every Python process of the pod, agent and workers, imports it).

libfaketime shifts the clocks a pod's processes read, and the file times the C library's `stat` returns; but CPython
reads file times through `stat64`, `lstat64` and `fstat64`, which libfaketime 0.9.10 does not wrap, so a pod saw its own
files' times on the true clock: measured, a file written under FAKETIME=+100 read back with an mtime 100 s before
`time.time()`. On a real node the kernel stamps a file from the same skewed clock the processes read. It matters to the
recoverable plugin, which stamps a worker's failure with its error file's mtime (`plugin/task.py`
`refine_first_failure_timestamp`): here the `os` functions the standard library reads file times through are wrapped to
shift them by the node's offset.
"""

import os


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


def _on_the_node_s_clock(read, offset_ns: int):
    def wrapped(*args, **kwargs):
        return _shifted(read(*args, **kwargs), offset_ns)

    wrapped.__name__, wrapped.__doc__ = read.__name__, read.__doc__
    return wrapped


def _install() -> None:
    offset = os.environ.get("AGGSIM_NODE_CLOCK_OFFSET_NS")
    if not offset:
        return
    offset_ns = int(offset)
    os.stat = _on_the_node_s_clock(os.stat, offset_ns)
    os.lstat = _on_the_node_s_clock(os.lstat, offset_ns)
    os.fstat = _on_the_node_s_clock(os.fstat, offset_ns)


_install()
