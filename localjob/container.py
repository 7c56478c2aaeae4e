"""A pod's container on this machine: its command is PID 1 of a new PID namespace, as a container runtime starts it.

Which process is PID 1 decides what the kubelet's SIGTERM does (`aggregation.kinds.Entrypoint`): the kernel drops a
signal that a PID namespace's init has no handler for, so `pyflyte-execute` as PID 1 outlives a SIGTERM that kills
it anywhere else. Only a real PID 1 shows that, so a local pod is one.

A pod also has its own hostname, its name, and an /etc/hosts the kubelet writes (here: every pod of the job, each at
a loopback address of its own). torch elastic tells the nodes of a rendezvous apart by hostname and pid
(`_NodeDescGenerator.generate`: `socket.getfqdn()`, `os.getpid()`), and agents that are each their namespace's
PID 1, or its PID 2 under pyflyte-fast-execute, share a pid: only their hostnames, as in Kubernetes, keep them apart.

`python -m localjob.container FD HOSTNAME HOSTS -- COMMAND...` makes the namespaces (PID, UTS, mount), names the
host, mounts HOSTS over /etc/hosts, forks COMMAND as PID 1, writes COMMAND's pid as this machine sees it to FD (or
`error: ...` when it cannot), and exits as a container runtime reports its container: COMMAND's exit status, or 128
+ the signal that killed it. When PID 1 exits the kernel kills everything else in the namespace, as in a container.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import re
import select
import shutil
import sys
import tarfile
from pathlib import Path

from aggregation.kinds import Entrypoint

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
#: the launcher's exit status when no container could be made (a container runtime's own failure, as Docker's 125)
CANNOT_START = 125
LOOPBACK = ipaddress.IPv4Address("127.0.0.0")
#: how long the launcher may take to report its container's PID 1
START_SECONDS = 30.0


#: a Kubernetes pod name (a DNS subdomain, RFC 1123), which is what a pod's hostname is made of
_POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class ContainerError(RuntimeError):
    """A pod's container cannot be made here (one line: what and why)."""


def hostnames(pods: list[str]) -> dict[str, str]:
    """Each pod's hostname: its name cut to 63 characters, as the kubelet makes it (`GeneratePodHostNameAndDomain`).
    A name that no pod could have cannot name a host, nor stand in /etc/hosts: refused."""
    names = {}
    for pod in pods:
        if not _POD_NAME.fullmatch(pod):
            raise ContainerError(
                f"pod {pod!r} cannot be a real pod's name (a DNS subdomain: lowercase letters, digits, '-' and '.'), "
                "and a real pod's hostname is its name"
            )
        names[pod] = pod[:63].rstrip("-.")
    shared = [pod for pod in pods if list(names.values()).count(names[pod]) > 1]
    if shared:
        raise ContainerError(
            f"pods {shared[0]!r} and {shared[1]!r} would share the hostname {names[shared[0]]!r} (a pod's hostname is "
            "its name's first 63 characters), which torch elastic takes for one node"
        )
    return names


def check_runnable(entrypoint: Entrypoint, job_pods: list[str]) -> dict[str, str]:
    """The job's pods can be containers here: their names can be hostnames, and the entrypoint's programs are
    installed. Returns each pod's hostname; `ContainerError` (one line) if not. `run-local` asks before any pod starts
    (`localjob.runner.check_playable`)."""
    names = hostnames(job_pods)
    if entrypoint is Entrypoint.INIT_THEN_EXECUTE and shutil.which("tini") is None:
        raise ContainerError(
            "task.entrypoint INIT_THEN_EXECUTE runs pyflyte-execute under tini, which is not installed here "
            "(Debian package tini; .ci/system-packages installs it)"
        )
    return names


def entrypoint_command(
    entrypoint: Entrypoint, execute: list[str], pod: str, pod_dir: Path, job_pods: list[str], report_fd: int
) -> list[str]:
    """The launcher's command for pod `pod` of a job of `job_pods`, whose container runs `execute` (a pyflyte-execute
    command line) as `entrypoint` says: through `pyflyte-fast-execute`, as PID 1 itself, or under tini. Its files
    (code, /etc/hosts) go under `pod_dir`."""
    names = check_runnable(entrypoint, job_pods)
    pod_dir.mkdir(parents=True, exist_ok=True)
    hosts = pod_dir / "hosts"
    hosts.write_text(hosts_file(list(names.values())))
    if entrypoint is Entrypoint.EXECUTE:
        inner = execute
    elif entrypoint is Entrypoint.INIT_THEN_EXECUTE:
        inner = [shutil.which("tini") or "tini", "--", *execute]
    else:
        fast_execute = Path(execute[0]).with_name("pyflyte-fast-execute")
        if not fast_execute.exists():
            raise ContainerError(f"pyflyte-fast-execute not found next to {execute[0]}: install the plugin extra")
        inner = [
            str(fast_execute),
            "--additional-distribution",
            str(fast_registered_distribution(pod_dir / "code")),
            "--dest-dir",
            str(pod_dir / "code"),
            "--",
            *execute,
        ]
    return [sys.executable, "-m", "localjob.container", str(report_fd), names[pod], str(hosts), "--", *inner]


def fast_registered_distribution(code_dir: Path) -> Path:
    """The code distribution a fast-registered task's pod downloads and unpacks into its `--dest-dir` before it runs
    pyflyte-execute. The task's code is this package, installed in the "image"; the archive carries a note saying so,
    as a fast registration of a project whose modules the image already holds would carry its own files."""
    code_dir.mkdir(parents=True, exist_ok=True)
    archive = code_dir.with_name("code.tar.gz")
    note = code_dir.with_name("README")
    note.write_text("flyte-aggsim: the task's modules (localjob.workloads) are installed in this pod's image\n")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(note, arcname="README")
    return archive


def read_init_pid(report_fd: int, pod: str) -> int:
    """The pid (as this machine sees it) of the container's PID 1, as the launcher reports it on `report_fd`."""
    try:
        ready, _, _ = select.select([report_fd], [], [], START_SECONDS)
        line = os.read(report_fd, 512).decode(errors="replace").strip() if ready else ""
    finally:
        os.close(report_fd)
    if line.isdigit():
        return int(line)
    why = line.removeprefix("error: ") if line else f"no PID 1 reported within {START_SECONDS:.0f} s"
    raise ContainerError(f"pod {pod}: cannot make its container (PID 1, hostname, /etc/hosts) here: {why}")


def _libc_call(name: str, *args) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def _new_namespaces() -> None:
    """New PID (for the next child), UTS and mount namespaces; without CAP_SYS_ADMIN, inside a new user namespace
    that maps this user to itself (as rootless container runtimes do)."""
    flags = CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWNS
    try:
        _libc_call("unshare", flags)
        return
    except PermissionError:
        pass
    uid, gid = os.getuid(), os.getgid()
    _libc_call("unshare", CLONE_NEWUSER | flags)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _become_host(hostname: str, hosts: str) -> None:
    """This pod's hostname, and its /etc/hosts mounted over the machine's (in its own mount namespace only)."""
    _libc_call("mount", b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    _libc_call("mount", hosts.encode(), b"/etc/hosts", None, MS_BIND, None)
    name = hostname.encode()
    _libc_call("sethostname", name, len(name))


def hosts_file(hosts: list[str]) -> str:
    """The /etc/hosts of every pod of a job: each pod's host at a loopback address of its own, so that each one's
    `socket.getfqdn()` is its own name (the reverse lookup of a shared address would name one pod for all)."""
    lines = ["127.0.0.1\tlocalhost"]
    lines += [
        f"127.{index // 65536}.{index // 256 % 256}.{index % 256 + 2}\t{host}" for index, host in enumerate(hosts)
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print("usage: python -m localjob.container FD HOSTNAME HOSTS -- COMMAND...", file=sys.stderr)
        return CANNOT_START
    report, hostname, hosts, command = int(argv[0]), argv[1], argv[2], argv[4:]
    try:
        _new_namespaces()
        _become_host(hostname, hosts)
    except OSError as e:
        os.write(report, f"error: {e.strerror}\n".encode())
        return CANNOT_START
    pid = os.fork()
    if pid == 0:
        os.close(report)
        try:
            os.execvp(command[0], command)
        except OSError as e:
            print(f"container: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        os._exit(127)
    os.write(report, f"{pid}\n".encode())
    os.close(report)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
