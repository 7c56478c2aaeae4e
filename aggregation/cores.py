"""How many cores this process may use: its CPU affinity, within its cgroups' CPU quota (how many worker processes
a long sweep starts by default, `parallel.ordered_map`)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable, Optional


def usable_cores(cgroups: Path = Path("/proc/self/cgroup"), mounts: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on: its CPU affinity (`taskset`, a cpuset), and no more than its cgroups' CPU
    quota allows, rounded up (a container limited to 2 CPUs on a 64-core node sees 64 cores, and 64 workers would
    each import the model to share 2 CPUs' time)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cpu_quota(cgroups, mounts)
    return max(1, min(cores, math.ceil(quota)) if quota is not None else cores)


def cpu_quota(cgroups: Path = Path("/proc/self/cgroup"), mounts: Path = Path("/sys/fs/cgroup")) -> Optional[float]:
    """The CPUs' worth of time this process's cgroups allow, the tightest along its cgroup's path (None: no quota,
    or no cgroups to read). cgroup v2: `cpu.max` ("max 100000" or "QUOTA PERIOD"); v1: `cpu.cfs_quota_us` (-1: none)
    over `cpu.cfs_period_us`, in the hierarchy that has the cpu controller."""
    try:
        lines = cgroups.read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            limits += _along(mounts, path, _v2_quota)
        elif "cpu" in controllers.split(","):
            limits += _along(mounts / controllers, path, _v1_quota)
    return min(limits, default=None)


def _along(mount: Path, path: str, read: Callable[[Path], Optional[float]]) -> list[float]:
    """`read` of the cgroup at `path` under `mount` and of each of its parents up to the mount's root (a container
    that sees its host's path but mounts its own cgroup at the root: the root alone)."""
    directory = mount / path.lstrip("/")
    if not directory.is_dir():
        directory = mount
    found = []
    while True:
        value = read(directory)
        if value is not None:
            found.append(value)
        if directory == mount or mount not in directory.parents:
            return found
        directory = directory.parent


def _v2_quota(directory: Path) -> Optional[float]:
    try:
        quota, period = (directory / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _v1_quota(directory: Path) -> Optional[float]:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        return None if quota < 0 else quota / int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError, ZeroDivisionError):
        return None
