"""`aggsim`: ask the propeller model about output prefixes, and run the real demo.

Usage errors, missing prefixes and missing filesystems print one line and exit 2, never a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from aggregation import defaults
from aggregation.kinds import FinalPhase
from aggregation.output_stream import whole_writes
from aggregation.readers import CANONICAL_ERROR_FILE, DEFAULT, EARLIEST, RULE_FUTURES_HEAD_FAILED, STRATEGIES

if TYPE_CHECKING:
    from rich.console import Console

    from aggregation.explain import Explanation

# Each command imports what it needs when it runs (rich, the simulator, the real runner): `aggsim explain --json`,
# run in shells and CI over large prefixes, pays only for the readers (benchmarks/bench_explain.py).

USAGE_ERROR = 2


def _fail(message: str) -> None:
    """One line on stderr (control characters from paths and values escaped), exit 2."""
    from aggregation.printable import printable

    click.echo(f"aggsim: {printable(message)}", err=True)
    sys.exit(USAGE_ERROR)


def _echo_json(value) -> None:
    """One JSON object on stdout: indented for a person at a terminal, one line for a pipe. Python's C encoder
    writes only unindented JSON: for 10,000 candidates it takes 17 ms where indenting takes 60 ms."""
    if sys.stdout.isatty():
        click.echo(json.dumps(value, indent=2))
    else:  # straight to the stream: `click.echo` would scan megabytes of JSON for colour codes to strip
        sys.stdout.write(json.dumps(value, separators=(",", ":")) + "\n")
        sys.stdout.flush()


#: spaces at the end of a line, before any colour codes that close it
_TRAILING_SPACES = re.compile(r" +((?:\x1b\[[0-9;]*m)*)(?=\n)")


class _WithoutTrailingSpaces:
    """rich wraps a long line at a space and leaves the space at the end of the line, where a diff, a `grep ' $'`
    or a copy-paste trips on it: each line is written without it. Everything else is the stream's own."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(_TRAILING_SPACES.sub(r"\1", text))

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    class PipedConsole(Console):
        def on_broken_pipe(self) -> None:
            """rich exits 1 when the reader goes away (`| head`), which `prove` means as COUNTEREXAMPLE: let the
            group end it as for any other output (128 + SIGPIPE)."""
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

        @property
        def file(self):
            return _WithoutTrailingSpaces(Console.file.fget(self))

        @file.setter
        def file(self, new_file) -> None:
            self._file = new_file

    # rich takes COLUMNS=0 (some CI runners report a 0-column terminal) as a width of 0 and prints nothing at all:
    # read as unset instead, as rich reads COLUMNS=abc (the terminal's width, or 80 in a pipe)
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) == 0:
        return PipedConsole(stderr=stderr, _environ={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    return PipedConsole(stderr=stderr)


def _version_message() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("flyte-aggsim")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        ours = "unknown (not installed)"
    mirrors = ", ".join(f"{name} {v}" for name, v in defaults.MIRRORED_VERSIONS.items())
    return f"aggsim {ours}\nmodels: {mirrors}"


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """--version, looked up only when asked for: package metadata costs every other command ~30 ms to import."""
    if value and not ctx.resilient_parsing:
        click.echo(_version_message())
        ctx.exit()


#: SIGINT (Ctrl-C), SIGTERM (`timeout`, CI runners, kill) and SIGHUP (a closed terminal) all end a command the same
#: way: every process it started is stopped and reaped, its temp files removed, then exit 128 + the signal.
INTERRUPTING_SIGNALS = (2, 15, 1)


class Interrupted(BaseException):
    """A SIGTERM or SIGHUP, raised where the process is so that every `with` block cleans up on the way out
    (a BaseException, like KeyboardInterrupt, so no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum, frame) -> None:
    import signal

    for other in INTERRUPTING_SIGNALS:  # the first signal decides; later ones must not cut the cleanup short
        signal.signal(other, signal.SIG_IGN)
    error = Interrupted(signum)
    held = sys.modules.get("aggregation.interrupts")  # loaded only by commands that run z3
    if held is not None and held.arrived(error):
        return  # z3 may be mid-call: raised at the next safe point (`interrupts.safe_point`)
    raise error


def _own_interrupts() -> None:
    """Take SIGINT, SIGTERM and SIGHUP back after importing flytekit: its context manager installs a SIGINT
    handler that calls exit(1) (`FlyteContextManager.initialize`), which would end the run with no message."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        for signum in INTERRUPTING_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:  # an interrupt already being handled stays so
                signal.signal(signum, _raise_interrupted)


class ReaderGone(Exception):
    """Our output's reader went away (`| head`). Not an OSError: click would turn that into exit 1, which `prove`
    means as COUNTEREXAMPLE.

    A closed pipe passes three layers, each against one library's default: rich's console (`on_broken_pipe`) would
    exit 1 itself, so it raises BrokenPipeError; click's `main` would make that exit 1, so the group's `invoke`
    turns it into this; and our `main` ends both (either can reach it) with 128 + SIGPIPE, as a shell expects."""


class AggsimGroup(click.Group):
    """Every failure ends in one line on stderr: usage errors (exit 2) and interruptions (128 + the signal)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise ReaderGone() from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        import signal
        import threading

        if sys.stdout is None:  # started with its standard output closed (`>&-`): nowhere to put an answer
            _last_words("aggsim: cannot write the output: standard output is closed")
            sys.exit(USAGE_ERROR)
        previous = (  # signal handlers can only be set from the main thread (an in-process caller may not be)
            {signum: signal.signal(signum, _raise_interrupted) for signum in INTERRUPTING_SIGNALS}
            if threading.current_thread() is threading.main_thread()
            else {}
        )
        for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show a character gets its escape
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors="backslashreplace")
        try:
            with whole_writes():
                return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:  # `aggsim` alone: the help, as --help shows it
            click.echo(e.format_message())
            sys.exit(0)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx is not None else "aggsim"
            _last_words(f"{where}: {e.format_message()}")
            sys.exit(e.exit_code)
        except click.ClickException as e:
            _last_words(f"aggsim: {e.format_message()}")
            sys.exit(e.exit_code)
        except (KeyboardInterrupt, click.exceptions.Abort) as e:
            _interrupted("SIGINT", 130, _notes(e))
        except Interrupted as e:
            _interrupted(signal.Signals(e.signum).name, 128 + e.signum, _notes(e))
        except (BrokenPipeError, ReaderGone):  # the reader went away (`| head`): stop quietly, as a SIGPIPE would
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(128 + signal.SIGPIPE)
        except OSError as e:
            if e.filename is None and e.errno in OUTPUT_ERRNOS:  # writing our own output failed (a full disk)
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                _last_words(f"aggsim: cannot write the output: {e.strerror}")
                sys.exit(USAGE_ERROR)
            _internal_error(e)
        except Exception as e:  # a bug: one line, the traceback only when asked for
            _internal_error(e)
        finally:  # when called in-process (tests, CliRunner), leave the caller's handlers as they were
            for signum, handler in previous.items():
                signal.signal(signum, handler)


#: errno values that mean "this process's output cannot be written" when no file name is attached
OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT, errno.EPIPE})


def _last_words(line: str) -> None:
    from aggregation.printable import printable

    try:
        click.echo(printable(line), err=True)
    except OSError:
        pass


def _internal_error(e: BaseException) -> None:
    """A bug in aggsim: say so in one line; AGGSIM_DEBUG=1 shows the traceback."""
    if os.environ.get("AGGSIM_DEBUG"):
        raise e
    said = "".join(f"; {note}" for note in _notes(e))
    _last_words(f"aggsim: internal error: {type(e).__name__}: {e} (AGGSIM_DEBUG=1 shows the traceback){said}")
    sys.exit(USAGE_ERROR)


def _notes(e: BaseException) -> tuple[str, ...]:
    """What the code the exception passed through added for the user's last line (PEP 678 `__notes__`; click's
    Abort carries the KeyboardInterrupt it replaced as its cause)."""
    return tuple(getattr(e, "__notes__", ())) or tuple(getattr(e.__cause__, "__notes__", ()))


def _interrupted(name: str, code: int, notes: tuple[str, ...] = ()) -> None:
    import signal

    for signum in INTERRUPTING_SIGNALS:  # cleanup is done; a second signal just ends it
        signal.signal(signum, signal.SIG_DFL)
    try:
        said = "".join(f"; {note}" for note in notes)
        click.echo(f"aggsim: interrupted ({name}); every process it started is stopped{said}", err=True)
    except OSError:
        pass
    sys.exit(code)


@click.group(cls=AggsimGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def main() -> None:
    """Which failure does Flyte report for a distributed PyTorch job, and does it retry?"""


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange, which also refuses nan (every comparison with nan is false, so click lets it through)."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if number != number:
            self.fail(f"{value!r} is not a number.", param, ctx)
        return number


TIMEOUT_OPTION = click.option(
    "--timeout",
    type=FiniteFloatRange(min=0, min_open=True, max=3600),
    default=30.0,
    show_default=True,
    help="seconds a remote store may take to answer one request (connect and read), else exit 2",
)


def _refuse_a_store_no_process_shares(location: str) -> None:
    """`memory://` is the filesystem of one Python process: each aggsim command starts empty, so any path would get a
    verdict about nothing. It is for the Python API (`explain_prefix` on a `MemoryPrefix`, or fsspec's memory store
    in the same process)."""
    if location.lower().startswith("memory://"):
        _fail(
            f"{location}: a memory:// store lives in one process, and this one has just started (it is empty); "
            "use the Python API (aggregation.explain_prefix) in the process that wrote it"
        )


def _quiet_store_loggers(location: str) -> None:
    """Storage clients log retries and credential lookups with tracebacks; our one line says what failed.
    A local path loads no storage client (and need not pay for `logging`)."""
    if "://" not in location:
        return
    import logging

    for name in ("gcsfs", "s3fs", "aiobotocore", "botocore", "google", "google.auth", "fsspec", "adlfs", "azure"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


#: Flyte's own integer type for retries and attempt counters (core.RetryStrategy.retries, NodeStatus.Attempts)
UINT32 = click.IntRange(0, 2**32 - 1)


class LocalPath(click.Path):
    """`click.Path`, refusing a NUL byte as a usage error: the OS cannot name such a file, and `os.stat` raises
    ValueError, not OSError, on one (only a caller in this process can pass it: argv cannot hold one); and an
    empty name, which names no file."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and "\x00" in value:
            self.fail(f"{value!r}: a file name cannot hold a NUL byte", param, ctx)
        if value == "":  # it would read as "not given" wherever the option is tested for truth
            self.fail("an empty file name names no file", param, ctx)
        return super().convert(value, param, ctx)


TIMINGS_PROFILE_OPTION = click.option(
    "--timings-profile",
    "profile_path",
    type=LocalPath(dir_okay=False),
    metavar="FILE",
    help="pod timings measured by `aggsim calibrate --profile FILE`: their medians become the defaults",
)


def _scenario_source(scenario_path: str, profile_path: str | None):
    """The scenario file, with the timings profile applied; raises ScenarioError or ProfileError (one line)."""
    from aggregation.scenario import read_scenario

    source = read_scenario(scenario_path)
    if not profile_path:
        return source
    from aggregation.profile import check_applies, read_profile

    profile = read_profile(profile_path)
    check_applies(profile, source.message, profile_path)
    return source.with_profile(profile)


MAX_DOWNLOAD_MB_OPTION = click.option(
    "--max-download-mb",
    type=click.IntRange(0, 2**63 - 1),
    help=f"storage.limits.maxDownloadMBs: the error-file size limit [default: {defaults.MAX_DOWNLOAD_MBS}]",
)

PROPELLER_CONFIG_OPTION = click.option(
    "--propeller-config",
    "config_files",
    multiple=True,
    type=LocalPath(dir_okay=False),
    metavar="FILE",
    help="the deployment's propeller/flyte configuration YAML (repeatable; later files win)",
)


def _given_on_command_line(option: str) -> bool:
    """Whether the user typed `option` (a parameter's name), rather than it keeping its default."""
    return click.get_current_context().get_parameter_source(option) == click.core.ParameterSource.COMMANDLINE


#: a prover's time budget may be a week at most: inf and 1e400 are no budget (and overflow the deadline's clock)
MAX_BUDGET_SECONDS = 7 * 86400.0


def budget_options(then: str):
    """`--max-paths` and `--max-seconds`: the prover's budget, and what happens when it runs out."""

    def decorate(command):
        command = click.option(
            "--max-seconds",
            type=FiniteFloatRange(min=0.1, max=MAX_BUDGET_SECONDS),
            default=defaults.PROVE_MAX_SECONDS,
            show_default=True,
            help=f"explore at most this long, then {then}",
        )(command)
        return click.option(
            "--max-paths",
            type=click.IntRange(min=1),
            default=defaults.PROVE_MAX_PATHS,
            show_default=True,
            help=f"at most this many paths, then {then}",
        )(command)

    return decorate


@main.command()
@click.argument("prefix")
@click.option(
    "--strategy",
    type=click.Choice(STRATEGIES),
    default="earliest",
    show_default=True,
    help="error aggregation strategy (earliest when enable-distributed-error-aggregation is on)",
)
@click.option("--outputs-declared", is_flag=True, help="the task declares outputs (outputs.pb must exist)")
@click.option("--retries", type=UINT32, default=0, show_default=True, help="the task's `retries`")
@click.option(
    "--attempts",
    type=UINT32,
    default=0,
    show_default=True,
    help="the node's attempts so far (NodeStatus.Attempts)",
)
@click.option(
    "--system-failures",
    type=UINT32,
    default=0,
    show_default=True,
    help="the node's system failures so far",
)
@click.option(
    "--max-system-failures",
    type=click.IntRange(0, 2**31 - 1),
    default=defaults.MAX_NODE_RETRIES_SYSTEM_FAILURES,
    show_default=True,
    help="propeller's max-node-retries-system-failures",
)
@click.option("--ignore-retry-cause", is_flag=True, help="propeller's ignore-retry-cause")
@MAX_DOWNLOAD_MB_OPTION
@PROPELLER_CONFIG_OPTION
@TIMEOUT_OPTION
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (on one line when piped)")
def explain(
    prefix,
    strategy,
    outputs_declared,
    retries,
    attempts,
    system_failures,
    max_system_failures,
    ignore_retry_cause,
    max_download_mb,
    config_files,
    timeout,
    as_json,
) -> None:
    """What propeller concludes if it observes the PyTorchJob Succeeded now, for output prefix PREFIX.

    With --propeller-config, the deployment's files set the strategy (Flyte's default, the single error.pb
    reader, where they leave enable-distributed-error-aggregation unset) and the limits; flags given on the
    command line still win.
    """
    if system_failures > attempts:
        _fail(f"--system-failures ({system_failures}) cannot exceed --attempts ({attempts})")
    deployment = _deployment(config_files)
    config = deployment.propeller_config()
    if _given_on_command_line("max_system_failures") or "max_node_retries_system_failures" not in deployment.values:
        config = replace(config, max_node_retries_system_failures=max_system_failures)
    if _given_on_command_line("ignore_retry_cause") or "ignore_retry_cause" not in deployment.values:
        config = replace(config, ignore_retry_cause=ignore_retry_cause)
    config = replace(config, max_payload_bytes=_payload_limit(config, max_download_mb))
    if config_files and not _given_on_command_line("strategy"):
        strategy = EARLIEST if deployment.error_aggregation else DEFAULT  # unset (or null): Flyte's default, off
    from aggregation.explain import DynamicTaskPrefix, explain_prefix
    from aggregation.propeller import NodeState
    from aggregation.propeller_store import StoreNamingUnknown
    from aggregation.storage import FsspecPrefix, StorageError, StoreUnreachable, not_a_directory, open_prefix

    _refuse_a_store_no_process_shares(prefix)
    _quiet_store_loggers(prefix)
    try:
        store = open_prefix(prefix, timeout=timeout)
        if isinstance(store, FsspecPrefix) and store.remote and store.whole_object_size() is not None:
            raise StorageError(not_a_directory(prefix, exists=True))  # as for a local file: an object, not a prefix
        state = NodeState(attempts, system_failures)
        explanation = explain_prefix(store, strategy, outputs_declared, retries, state, config, note_unread=True)
    except (StorageError, StoreUnreachable, StoreNamingUnknown, DynamicTaskPrefix) as e:
        _fail(str(e))
        return
    if as_json:
        _echo_json(explanation.to_json())
    else:
        render_explanation(explanation, _console())


def render_explanation(explanation: Explanation, console: Console) -> None:
    """The candidates as a table, or, when that would not fit the terminal, as a list; text printed literally."""
    from rich.text import Text

    from aggregation.gotime import rfc3339_nanos
    from aggregation.report import fits, literal, table

    read = explanation.read
    headers = ("", "file", "timestamp", "code", "kind", "recoverable", "worker")
    rows = []
    for candidate in read.candidates:
        error = candidate.error
        mark = Text("won", style="bold green") if candidate.selected else Text("bad" if candidate.problem else "")
        if error is None:  # a file the round could not read or that is over the limit: the round error names it
            rows.append((mark, literal(candidate.path), "-", "-", "-", "-", "-"))
        else:
            rows.append(
                (
                    mark,
                    literal(candidate.path),
                    rfc3339_nanos(error.timestamp_ns) or "(none: epoch)",
                    literal(error.code),
                    error.kind,
                    "yes" if error.recoverable else "no",
                    literal(error.worker or "-"),
                )
            )
    title = literal(f"{explanation.location}  ({read.strategy} strategy)")
    if rows and fits(console, [[h, *(row[i] for row in rows)] for i, h in enumerate(headers)]):
        console.print(table(title, headers, rows))
    elif rows:  # narrow terminal or a pipe: one block per file, nothing cut
        console.print(title)
        for row in rows:
            console.print(Text.assemble(row[0] or "-", "  ", row[1]))
            for header, value in zip(headers[2:], row[2:]):
                console.print(Text.assemble(f"    {header}: ", value))
    else:
        nothing = "no error files" if read.strategy == EARLIEST else f"no {CANONICAL_ERROR_FILE}"
        if read.rule == RULE_FUTURES_HEAD_FAILED and not read.candidates:
            nothing = "no error file read: the HEAD of futures.pb before the reader failed"
        console.print(literal(f"{explanation.location}: {nothing} ({read.strategy} strategy)"))
    if explanation.not_read:
        hint = " (try --strategy earliest)" if explanation.per_worker_files_not_read else ""
        console.print(literal(explanation.not_read_note + hint))
    if read.round_error:
        console.print(Text.assemble(("round error", "bold red"), ": ", literal(read.round_error)))
    else:
        console.print(literal(f"rule: {read.rule}"))
    console.print(
        Text.assemble(
            "task phase: ", (explanation.outcome.phase.value, "bold"), " (", literal(explanation.outcome.reason), ")"
        )
    )
    console.print(Text.assemble("node: ", *_decision_text(explanation.decision)))
    _render_chance(explanation, console)


def _decision_text(decision) -> tuple:
    from aggregation.report import literal

    detail = literal(f" {decision.code} ({decision.kind})") if decision.code else ""
    if decision.decision.value == "WAIT" and decision.message:  # rounds that fail for ever: say why it never ends
        detail = literal(f" ({decision.message})")
    return (decision.decision.value, "bold"), detail


def _render_chance(explanation, console) -> None:
    """Where the winner won a tie by its drawn name's place in the listing, what other runs may conclude."""
    from rich.text import Text

    from aggregation.explain import NOTE_KEYS
    from aggregation.report import literal

    verdicts = explanation.chance_verdicts()
    if not verdicts:
        return
    others = [(keys, other) for keys, other in verdicts if other.verdict != explanation.verdict]
    why = "the tie is chance: flytekit draws each error-<uuid4 hex>.pb name at random, so another run may list"
    if not others:
        console.print(literal(f"{why} another tied file first, with the same verdict"))
        return
    console.print(literal(f"{why} another tied file first:"))
    for keys, other in others:
        shown = " or ".join(keys[:NOTE_KEYS]) + (f" or {len(keys) - NOTE_KEYS} more" if len(keys) > NOTE_KEYS else "")
        console.print(
            Text.assemble(
                "  node ",
                *_decision_text(other.decision),
                literal(f", task phase {other.outcome.phase.value}, with {shown} first"),
            )
        )


@main.command()
@click.argument("targets", nargs=-1, required=True, metavar="FILE_OR_PREFIX...")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--allow-empty", is_flag=True, help="pass when there are no error files (else that fails: exit 1)")
@MAX_DOWNLOAD_MB_OPTION
@PROPELLER_CONFIG_OPTION
@TIMEOUT_OPTION
def validate(targets, as_json, allow_empty, max_download_mb, config_files, timeout) -> None:
    """Lint error files (or every error* key of a prefix) against what correct aggregation needs.

    Exit 0 when every file passes, 1 when any fails or a path holds none (unless --allow-empty), 2 when a path
    cannot be opened (the other paths' findings are still printed; --json lists it under "not_opened"). The size
    limit is --max-download-mb, else the deployment's (--propeller-config), else propeller's default. A prefix
    without error files is what upstream's plugin leaves after a preemption.
    """
    from aggregation.storage import StorageError, StoreUnreachable
    from aggregation.validate import validate_target

    limit = _payload_limit(_deployment(config_files).propeller_config(), max_download_mb)
    for target in targets:
        _refuse_a_store_no_process_shares(target)
        _quiet_store_loggers(target)
    reports, unopened, empty = [], [], []  # a path that cannot be opened does not hide the other paths' findings
    for target in targets:
        try:
            found = validate_target(target, timeout, limit)
        except (StorageError, StoreUnreachable) as e:
            unopened.append(str(e))
            continue
        reports.extend(found)
        if not found:  # one pod's prefix with nothing in it is what upstream leaves, beside its siblings' files too
            empty.append(target)
    passed = all(r.ok for r in reports) and not (empty and not allow_empty) and not unopened
    if as_json:
        click.echo(
            json.dumps(
                {
                    "files": [
                        {
                            "path": r.path,
                            "ok": r.ok,
                            "findings": [{"check": f.check, "message": f.message} for f in r.findings],
                        }
                        for r in reports
                    ],
                    "not_opened": unopened,
                    "no_error_files": empty,
                    "ok": passed,
                },
                indent=2,
            )
        )
    else:
        from aggregation.printable import printable

        # a key may hold a newline or an escape sequence: one finding stays one line, and the terminal shows the name
        for report in reports:
            if report.ok:
                click.echo(printable(f"{report.path}: ok"))
            for finding in report.findings:
                click.echo(_finding_line(printable(f"{report.path}: {finding.check}: {finding.message}")))
        hint = "" if allow_empty else " (pass --allow-empty if that is expected)"
        for target in empty:
            click.echo(printable(f"{target}: no error files found{hint}"))
    if unopened:
        _fail("; ".join(unopened))  # one line, however many paths
    sys.exit(0 if passed else 1)


def _finding_line(text: str) -> str:
    """A finding as people read it: one line in a pipe (for grep and CI logs, as linters print), and at a terminal
    wrapped to its width, the lines after the first indented. A path or word longer than a line is never cut."""
    if not sys.stdout.isatty():
        return text
    import shutil

    from aggregation.cells import wrap_cells

    width = max(40, shutil.get_terminal_size().columns)
    return "\n".join(wrap_cells(text, width, subsequent_indent="    "))


def _payload_limit(config, max_download_mb: "int | None") -> int:
    """The error files' size limit: `--max-download-mb`, else the deployment's (`config`, from its files), else
    propeller's default (`explain` and `validate` alike)."""
    if max_download_mb is None:
        return config.max_payload_bytes
    from aggregation.printable import printable
    from aggregation.propeller import payload_limit, payload_limit_note

    note = payload_limit_note(max_download_mb)
    if note:
        click.echo(f"aggsim: note: --max-download-mb: {printable(note)}", err=True)
    return payload_limit(max_download_mb)


def _check_plot_path(plot_path: str) -> None:
    """matplotlib is there and knows the file's format (checked before any long run); one line and exit 2 if not."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # a file, never a window
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError as e:
        _fail(f"--plot needs matplotlib: pip install 'flyte-aggsim[notebooks]' ({e})")
        return
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(plot_path).suffix.lstrip(".").lower()
    if suffix not in formats:
        _fail(f"--plot {plot_path}: the file name must end in one of {', '.join('.' + f for f in sorted(formats))}")
    if suffix == "pgf":  # matplotlib writes PGF through a TeX program (rcParams["pgf.texsystem"]), at save time
        import shutil

        texsystem = matplotlib.rcParams["pgf.texsystem"]
        if shutil.which(texsystem) is None:
            _fail(f"--plot {plot_path}: matplotlib writes .pgf through {texsystem}, which is not installed here")


def _need_z3(what: str) -> None:
    """The SMT solver the prover runs on is installed; one line and exit 2 if not."""
    try:
        import z3  # noqa: F401
    except ImportError as e:
        _fail(f"{what} needs z3: pip install z3-solver ({e})")


def _save_figure(plot_path: str, drawing: str, *args) -> None:
    """`aggregation.plot.<drawing>(*args)` written to the file."""
    _check_plot_path(plot_path)
    from aggregation import plot

    try:
        getattr(plot, drawing)(*args).savefig(plot_path, dpi=110)
    except OSError as e:
        _fail(f"--plot {plot_path}: {e.strerror or e}")
    except RuntimeError as e:  # a writer's own program failed (matplotlib raises RuntimeError for those)
        _fail(f"--plot {plot_path}: matplotlib could not write it: {str(e).splitlines()[0] if str(e) else e}")


PLUGIN_CHOICE = click.Choice(["upstream", "seed-pr", "recoverable"])
DEMO_SAMPLES = 20_000  # the demo's default sweeps (10,368 and 2,592 assignments) are enumerated, not sampled


def _deployment_sweep_arguments(config_files) -> dict:
    """A deployment fixes the aggregation flag (Flyte's default where its files leave it unset): sweep only that one."""
    if not config_files:
        return {}
    deployment = _deployment(config_files)
    return {"deployment": deployment, "flags": (deployment.error_aggregation,)}


def _deployment(config_files):
    """The deployment's settings from its propeller configuration files. With none, an empty `Deployment`: its
    settings are Flyte's defaults (the aggregation flag off), so a command plays a scenario on it only when files
    were given."""
    from aggregation.deployment import Deployment, DeploymentConfigError, load_deployment

    if not config_files:
        return Deployment({})
    try:
        deployment = load_deployment(config_files)
    except DeploymentConfigError as e:
        _fail(str(e))
    if deployment.notes:
        from aggregation.printable import printable

        for note in deployment.notes:
            click.echo(f"aggsim: note: {printable(note)}", err=True)
    return deployment


@main.command()
@click.argument("scenario_path", metavar="SCENARIO.textproto")
@click.option("--plugin", type=PLUGIN_CHOICE, help="override the scenario's plugin variant")
@click.option("--aggregation/--no-aggregation", default=None, help="override enable-distributed-error-aggregation")
@click.option("--json", "as_json", is_flag=True, help="print the aggsim.v1.Execution record as JSON")
@click.option(
    "--plot",
    "plot_path",
    type=LocalPath(dir_okay=False),
    help="also draw the per-pod timeline to this file (.png, .svg, .pdf...)",
)
@click.option(
    "--expect",
    type=click.Choice([p.value for p in FinalPhase], case_sensitive=False),
    help="exit 1 unless the final phase is this one (for CI; in any case)",
)
@PROPELLER_CONFIG_OPTION
@TIMINGS_PROFILE_OPTION
def simulate(scenario_path, plugin, aggregation, as_json, plot_path, expect, config_files, profile_path) -> None:
    """Simulate a scenario: every attempt's timeline, propeller's read and decision, the final phase."""
    from aggregation.profile import ProfileError
    from aggregation.record import execution_to_json
    from aggregation.scenario import ScenarioError
    from aggregation.simulate import simulate as run

    try:
        spec = _scenario_source(scenario_path, profile_path).spec(plugin)
    except (ScenarioError, ProfileError) as e:
        _fail(str(e))
        return
    if config_files:
        spec = spec.with_deployment(_deployment(config_files))
    if aggregation is not None:
        spec = spec.with_aggregation(aggregation)
    try:
        execution = run(spec)
    except ScenarioError as e:
        _fail(str(e))
        return
    if plot_path:
        _save_figure(plot_path, "timeline_figure", execution)
    if as_json:
        click.echo(json.dumps(execution_to_json(execution), indent=2))
    else:
        from aggregation.report import render_execution

        render_execution(execution, _console())
    if expect is not None and execution.final_phase.value != expect:
        click.echo(f"aggsim: expected final phase {expect}, got {execution.final_phase.value}", err=True)
        sys.exit(1)


@main.command()
@click.argument("scenario_path", metavar="SCENARIO.textproto")
@click.option(
    "--vary",
    "varies",
    multiple=True,
    metavar="FIELD=RANGE",
    help="e.g. timings.upload_seconds=0.05,1,3 or attempts[0].events[1].at_seconds=30:31:0.2 (repeatable)",
)
@click.option(
    "--samples",
    type=click.IntRange(min=1, max=defaults.MAX_SWEEP_SAMPLES),
    default=2000,
    show_default=True,
    help="enumerate exhaustively up to this many assignments, else sample this many",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="sampling seed (>= 0: Python's Random takes -1 as 1)",
)
@click.option("--plugin", "plugins", type=PLUGIN_CHOICE, multiple=True, help="plugin variants (default: all three)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option(
    "--out",
    "out_path",
    type=LocalPath(dir_okay=False),
    help="also write one row per case (assignment x plugin x aggregation) with its outcome: .csv or .jsonl "
    "(as FILE.partial until the sweep is done)",
)
@click.option(
    "--plot",
    "plot_path",
    type=LocalPath(dir_okay=False),
    help="also draw the outcomes to this file (.png, .svg, .pdf...): a heat map, or the exact regions",
)
@budget_options("refuse (exact region maps only; per plugin x aggregation cell)")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    help="play the grid's points, or draw an exact region map's cells, in at most this many processes (default: "
    "for a grid, one per core this process may use, within its CPU affinity and its cgroup's CPU quota, and a grid "
    "of a few thousand simulations or fewer stays in one; for a region map, one)",
)
@PROPELLER_CONFIG_OPTION
@TIMINGS_PROFILE_OPTION
def sweep(
    scenario_path,
    varies,
    samples,
    seed,
    plugins,
    as_json,
    out_path,
    plot_path,
    max_paths,
    max_seconds,
    jobs,
    config_files,
    profile_path,
) -> None:
    """Explore the race: outcome distribution per plugin variant x aggregation flag, with counterexamples.

    With two ranges FIELD=LO..HI (and nothing else varied), the answer is exact instead: every path through
    the simulator over the whole rectangle (found as `aggsim prove` finds them), each outcome's share a ratio of
    exact areas, and --plot draws the regions with their true boundaries.

    With --timings-profile, the pod phases the profile measured are varied over their measured min, median
    and max (unless the scenario sets them), and the medians are every other case's defaults."""
    from aggregation.caselog import CaseLog, CaseLogError
    from aggregation.explore import default_variations, parse_variation
    from aggregation.explore import sweep as run_sweep
    from aggregation.profile import ProfileError, check_applies, read_profile
    from aggregation.report import ProgressBar, render_sweep, sweep_to_json
    from aggregation.scenario import PLUGIN_VARIANTS, ScenarioError, read_scenario

    repeated = next((p for i, p in enumerate(plugins) if p in plugins[:i]), None)
    if repeated is not None:  # each cell would be played twice, and counted twice in --out
        _fail(f"--plugin {repeated}: given twice")
    ranges = [v for v in varies if ".." in v.partition("=")[2]]
    if ranges:
        _region_sweep(
            scenario_path,
            varies,
            plugins,
            as_json,
            out_path,
            plot_path,
            config_files,
            profile_path,
            max_paths,
            max_seconds,
            jobs,
        )
        return
    for option in ("max_paths", "max_seconds"):
        if _given_on_command_line(option):
            flag = "--" + option.replace("_", "-")
            _fail(f"{flag}: a grid explores no paths (only an exact region map, two FIELD=LO..HI ranges, does)")
    from aggregation.cores import usable_cores
    from aggregation.parallel import WorkerDied

    if plot_path:
        _check_plot_path(plot_path)
    try:
        source = read_scenario(scenario_path)
        profile = read_profile(profile_path) if profile_path else None
        if profile is not None:
            check_applies(profile, source.message, profile_path)
        plugins = plugins or tuple(PLUGIN_VARIANTS)
        # the scenario as written must be one the model plays: the usual suspects are varied around its values
        source.with_profile(profile).spec(plugins[0])
        variations = [parse_variation(v, source.message) for v in varies] or default_variations(source, profile)
        source = source.with_profile(profile)
        with contextlib.ExitStack() as stack:
            log = stack.enter_context(CaseLog(out_path, [v.field for v in variations])) if out_path else None
            bar = stack.enter_context(
                ProgressBar("sweeping", enabled=sys.stderr.isatty() and not as_json, console=_console(stderr=True))
            )
            result = run_sweep(
                source,
                variations,
                samples,
                seed,
                plugins,
                on_case=(lambda a, cell, *case: log.write(a, cell.plugin, cell.aggregation, *case)) if log else None,
                progress=bar,
                processes=jobs or usable_cores(),
                **_deployment_sweep_arguments(config_files),
            )
    except (ScenarioError, ProfileError, CaseLogError, WorkerDied) as e:
        _fail("; ".join((str(e), *_notes(e))))
        return
    if plot_path:
        _save_figure(plot_path, "outcome_heatmap", result)
    if as_json:
        click.echo(json.dumps(sweep_to_json(result), indent=2))
    else:
        render_sweep(result, _console())


def _region_sweep(
    scenario_path,
    varies,
    plugins,
    as_json,
    out_path,
    plot_path,
    config_files,
    profile_path,
    max_paths,
    max_seconds,
    jobs,
) -> None:
    """`sweep` with two ranges: exact region maps per plugin x aggregation cell (each within the prover's budget),
    the cells drawn in `--jobs` processes when asked."""
    from aggregation.explore import outcome_meanings
    from aggregation.interrupts import holding
    from aggregation.parallel import WorkerDied
    from aggregation.profile import ProfileError
    from aggregation.prove import Interval, parse_range
    from aggregation.region_report import regions_to_json, render_regions
    from aggregation.regions import region_sweep
    from aggregation.scenario import PLUGIN_VARIANTS, ScenarioError

    if out_path:
        _fail("--out: an exact region map has regions, not cases; --json lists every region's polygons")
    if plot_path:
        _check_plot_path(plot_path)
    _need_z3("an exact region map")
    try:
        source = _scenario_source(scenario_path, profile_path)
        ranges = [parse_range(v, source.message, "an exact region map (a FIELD=LO..HI given)") for v in varies]
        odd = next((v for v, r in zip(varies, ranges) if not isinstance(r, Interval)), None)
        if odd is not None and ".." in odd:  # a whole-number field's LO..HI is its values, not a continuous range
            raise ScenarioError(
                f"--vary {odd}: an exact region map draws two continuous fields, and this one takes whole values "
                "(LO..HI is the set of them); vary it as a grid (FIELD=a,b,c) or fix it and map two others"
            )
        if len(ranges) != 2 or odd is not None:
            raise ScenarioError(
                f"--vary {odd or varies[-1]}: an exact region map takes exactly two ranges FIELD=LO..HI and nothing "
                "else varied (FIELD=a,b,c or start:stop:step sample a grid instead)"
            )
        for option in ("samples", "seed"):  # after the ranges: a range that is wrong is the thing to say first
            if _given_on_command_line(option):
                _fail(f"--{option}: an exact region map (two FIELD=LO..HI ranges) samples nothing")
        plugins = plugins or tuple(PLUGIN_VARIANTS)
        source.spec(plugins[0])  # the scenario as written must be one the model plays
        arguments = _deployment_sweep_arguments(config_files)
        with holding(INTERRUPTING_SIGNALS):  # z3 at work: a signal waits for a safe point (`interrupts`)
            cells = region_sweep(
                source,
                *ranges,
                plugins,
                **arguments,
                max_paths=max_paths,
                max_seconds=max_seconds,
                # one process unless asked: a stopped map waits for the cells its workers hold, z3 for minutes
                processes=jobs or 1,
            )
    except (ScenarioError, ProfileError, WorkerDied) as e:
        _fail(str(e))
        return
    meaning = outcome_meanings(source.message)
    if plot_path:
        _save_figure(plot_path, "region_figure", [(c.label, c.map) for c in cells], meaning)
    if as_json:
        _echo_json(regions_to_json(cells))
    else:
        render_regions(cells, meaning, _console(), plotted=bool(plot_path))


PROVE_EXIT = {"PROVED": 0, "COUNTEREXAMPLE": 1, "UNKNOWN": 3}


@main.command()
@click.argument("scenario_path", metavar="SCENARIO.textproto")
@click.option(
    "--claim",
    required=True,
    metavar="CLAIM",
    help="retries | genuine-error-wins | phase=P[|P] | phase!=P | outcome=O | code=C (and != forms)",
)
@click.option(
    "--vary",
    "varies",
    multiple=True,
    metavar="FIELD=LO..HI",
    help=(
        "every value in [LO, HI], e.g. attempts[0].events[1].at_seconds=30..31 (an integer field: its whole values); "
        "or FIELD=a,b for a finite set"
    ),
)
@click.option("--plugin", type=PLUGIN_CHOICE, help="override the scenario's plugin variant")
@click.option("--aggregation/--no-aggregation", default=None, help="override enable-distributed-error-aggregation")
@budget_options("answer UNKNOWN")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@PROPELLER_CONFIG_OPTION
@TIMINGS_PROFILE_OPTION
def prove(
    scenario_path, claim, varies, plugin, aggregation, max_paths, max_seconds, as_json, config_files, profile_path
) -> None:
    """Decide a claim for every assignment of the varied fields: PROVED, COUNTEREXAMPLE or UNKNOWN.

    The simulator runs on symbolic numbers and an SMT solver (z3) enumerates every path through it, so the
    answer covers the whole box, not a grid. Exit status: 0 proved, 1 counterexample, 3 unknown, 2 bad input."""
    from aggregation.profile import ProfileError
    from aggregation.scenario import ScenarioError

    _need_z3("prove")
    from aggregation.interrupts import holding
    from aggregation.proof_report import proof_to_json, render_proof
    from aggregation.prove import parse_claim, parse_range
    from aggregation.prove import prove as run_prove

    try:
        source = _scenario_source(scenario_path, profile_path)
        ranges = [parse_range(v, source.message) for v in varies]
        parsed_claim = parse_claim(claim, source.message)
        deployment = _deployment(config_files) if config_files else None
        source.spec(plugin)  # the scenario as written must be one the model plays
        with holding(INTERRUPTING_SIGNALS):  # z3 at work: a signal waits for a safe point (`interrupts`)
            proof = run_prove(
                source,
                parsed_claim,
                ranges,
                plugin,
                aggregation,
                deployment,
                max_paths=max_paths,
                max_seconds=max_seconds,
            )
    except (ScenarioError, ProfileError) as e:
        _fail(str(e))
        return
    if as_json:
        _echo_json(proof_to_json(proof))
    else:
        render_proof(proof, _console())
    sys.exit(PROVE_EXIT[proof.verdict])


@contextlib.contextmanager
def _real_run(command: str, work_dir=None, force: bool = False, keep: bool = False):
    """The directory of a command that starts real pods (`aggregation.rundir`), entered: the plugin extra
    imported inside it (flytekit makes a sandbox dir at import), and our interrupt handling taken back from
    flytekit. One line and exit 2 when the directory cannot be used or the extra is missing."""
    from aggregation.rundir import RunDir, RunDirError

    run_dir = RunDir(work_dir, force=force, keep=keep, prefix=f"aggsim-{command}-")
    try:
        run_dir.prepare()
    except RunDirError as e:
        _fail(str(e))
    with run_dir:
        try:
            import localjob.workloads  # noqa: F401  (flytekit, its kfpytorch plugin and ours)
        except ImportError as e:
            _fail(f"{command} needs the plugin extra (flytekit, torch): {e}")
        _own_interrupts()
        yield run_dir


def _explain_real_failure(run_dir, attempt=None) -> None:
    """Print the first worker failure the real pods logged (in the attempt that disagreed), if any."""
    from localjob.evidence import first_worker_failure

    failure = first_worker_failure(run_dir, attempt)
    if failure is not None:
        click.echo(f"aggsim: first worker failure: {failure.describe()}", err=True)


@main.command("run-local")
@click.argument("scenario_path", metavar="SCENARIO.textproto")
@click.option("--plugin", type=click.Choice(["upstream", "recoverable"]), help="override the scenario's plugin")
@click.option(
    "--work-dir",
    type=LocalPath(file_okay=False),
    help="the run's files go here, and stay (default: a temp dir, kept only if the run disagrees or fails)",
)
@click.option("--force", is_flag=True, help="empty a --work-dir that holds an earlier run's files")
@click.option("--keep", is_flag=True, help="keep the run's files even when it agrees")
@click.option("--json", "as_json", is_flag=True, help="print both aggsim.v1.Execution records and the diff")
@TIMINGS_PROFILE_OPTION
def run_local(scenario_path, plugin, work_dir, force, keep, as_json, profile_path) -> None:
    """Run a scenario for real (pods as processes), next to the simulator's verdict. Exit 1 if they differ."""
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    warnings.filterwarnings("ignore", message="Configuring shared memory via")
    from aggregation.profile import ProfileError
    from aggregation.record import compare, execution_to_proto
    from aggregation.scenario import ScenarioError
    from aggregation.simulate import simulate as run_simulation

    try:
        spec = _scenario_source(scenario_path, profile_path).spec(plugin)
        simulated = execution_to_proto(run_simulation(spec))
    except (ScenarioError, ProfileError) as e:
        _fail(str(e))
        return
    console = _console(stderr=as_json)
    with _real_run("run-local", work_dir, force, keep) as run_dir:
        from localjob.realpods import LocalJobError
        from localjob.runner import Unplayable
        from localjob.runner import run_local as run_real

        try:
            with console.status(f"running {spec.name} for real ({len(spec.pods)} pods, plugin {spec.plugin})..."):
                real = execution_to_proto(run_real(spec, run_dir.path))
        except Unplayable as e:  # refused before any pod starts: there are no files to keep
            run_dir.discard()
            _fail(f"{scenario_path}: {e}")
            return
        except (LocalJobError, ValueError) as e:
            run_dir.keep()
            _explain_real_failure(run_dir.path)
            _fail(f"{scenario_path}: {e} (the run's files: {run_dir.path})")
            return
        diff = compare(simulated, real)
        agree = all(a == b for _, a, b in diff)
        if not agree:
            run_dir.keep()
            first = next(field for field, a, b in diff if a != b)
            number = re.match(r"attempt (\d+) ", first)
            _explain_real_failure(run_dir.path, int(number[1]) if number else None)
    if run_dir.kept and not work_dir:
        click.echo(f"aggsim: the run's files are kept in {run_dir.path}", err=True)
    if as_json:
        from aggregation.record import record_to_json

        click.echo(
            json.dumps(
                {
                    "real": record_to_json(real),
                    "simulated": record_to_json(simulated),
                    "agree": agree,
                    "diff": [{"field": f, "simulated": str(a), "real": str(b)} for f, a, b in diff],
                },
                indent=2,
            )
        )
    else:
        from aggregation.report import render_comparison, render_record_timeline

        render_record_timeline(real, console, "real run")
        render_comparison(diff, console)
    sys.exit(0 if agree else 1)


@main.command()
@click.option("--runs", type=click.IntRange(1, 1000), default=10, show_default=True, help="real pods, in turn")
@click.option("--start-method", type=click.Choice(["spawn", "fork"]), default="spawn", show_default=True)
@click.option(
    "--phases",
    "what",
    type=click.Choice(["report", "worker-group", "all"]),
    default="report",
    show_default=True,
    help="report: a preempted pod's report (one pod per run); worker-group: workers failing and finishing "
    "(two 2-pod jobs per run); all: both",
)
@click.option("--work-dir", type=LocalPath(file_okay=False), help="keep the runs' files here (default: a temp dir)")
@click.option("--force", is_flag=True, help="empty a --work-dir that holds earlier files")
@click.option("--json", "as_json", is_flag=True, help="every run's moments and each phase's quantiles")
@click.option(
    "--profile",
    "profile_path",
    type=LocalPath(dir_okay=False),
    metavar="FILE",
    help="write the phases into this timings profile (an existing one keeps its other phases)",
)
def calibrate(runs, start_method, what, work_dir, force, as_json, profile_path) -> None:
    """Measure pod phases with real pods, each next to the pod model's timing for it.

    report: a preempted pod's signal -> look -> error.pb landed -> exit; the middle phase is the plugin's
    check-then-write window, inside which a sibling's report can still be overwritten when aggregation is off.
    worker-group: a worker raised -> the agent's look finds it -> flytekit catches the failure, and workers
    returned -> the agent's look finds them gone.
    --profile FILE writes them as a timings profile that simulate, sweep and run-local take (--timings-profile).
    """
    import warnings

    warnings.filterwarnings("ignore", message="Configuring shared memory via")
    from aggregation.profile import ProfileError, read_profile, with_phases, write_profile
    from aggregation.report import ProgressBar, render_phases

    existing = None
    if profile_path and Path(profile_path).exists():
        try:
            existing = read_profile(profile_path)  # before the runs: a bad file must not cost them
        except ProfileError as e:
            _fail(f"--profile: {e}")
    console = _console(stderr=as_json)
    with _real_run("calibrate", work_dir, force) as run_dir:
        from localjob.calibrate import group_phases, measure, measure_groups, phases
        from localjob.realpods import LocalJobError

        reports, groups = what in ("report", "all"), what in ("worker-group", "all")
        total = runs * (reports + 2 * groups)
        samples, group_samples = [], []
        try:
            with ProgressBar("real runs", enabled=not as_json, console=_console(stderr=True)) as bar:
                bar(0, total)
                if reports:
                    samples = measure(
                        runs, run_dir.path / "runs", start_method, progress=lambda n, _: bar(n + 1, total)
                    )
                done = len(samples)
                if groups:
                    group_samples = measure_groups(
                        runs, run_dir.path / "groups", start_method, progress=lambda n: bar(done + n, total)
                    )
        except LocalJobError as e:
            run_dir.keep()
            _fail(f"{e} (the runs' files: {run_dir.path})")
            return
    measured = (phases(samples) if samples else []) + group_phases(group_samples, start_method, runs)
    if profile_path:
        import datetime
        import platform

        from localjob.calibrate import measured_phases

        day = datetime.date.today().isoformat()
        counted = [f"{runs} preempted pods"] * reports + [f"{runs} failing and {runs} finishing 2-pod jobs"] * groups
        note = f"{platform.node() or 'this machine'}, {day}: {' and '.join(counted)} ({start_method})"
        try:
            write_profile(profile_path, with_phases(existing, measured_phases(measured, start_method), note))
        except ProfileError as e:
            _fail(f"--profile: {e}")
        click.echo(f"aggsim: wrote {len(measured)} measured phases to {profile_path}", err=True)
    if as_json:
        from dataclasses import asdict

        click.echo(
            json.dumps(
                {
                    "runs": [asdict(s) for s in samples],
                    "group_runs": [asdict(s) for s in group_samples],
                    "phases": [
                        {
                            "phase": p.name,
                            "model_timing": p.model_timing,
                            "model_seconds": p.model_seconds,
                            **{k: p.quantile(q) for k, q in (("min", 0), ("median", 0.5), ("p90", 0.9), ("max", 1))},
                        }
                        for p in measured
                    ],
                },
                indent=2,
            )
        )
    else:
        plural = "s" if runs != 1 else ""
        subject = {"report": "a preempted pod's report", "worker-group": "the worker group's end"}.get(what, "phases")
        render_phases(measured, console, f"{subject}, {runs} real run{plural} ({start_method})")


@main.command()
@click.option("--real", is_flag=True, help="run real pods (pyflyte-execute, torch elastic) instead of the sweep")
def demo(real: bool) -> None:
    """The seed incident's headline table (a sweep); --real: one real pod SIGTERMed, upstream vs ours."""
    if not real:
        from aggregation.cores import usable_cores
        from aggregation.explore import default_variations
        from aggregation.explore import sweep as run_sweep
        from aggregation.parallel import WorkerDied
        from aggregation.report import render_sweep
        from aggregation.scenario import read_scenario

        def demo_sweep(source):
            try:
                return run_sweep(
                    source, default_variations(source), samples=DEMO_SAMPLES, seed=0, processes=usable_cores()
                )
            except WorkerDied as e:  # its points unplayed: no table, one line
                _fail(str(e))

        console = _console()
        path = _shipped_scenario("preemption_during_training.textproto")
        source = read_scenario(path)
        console.print(
            f"[bold]1. The seed incident[/bold] ({Path(path).name}): a spot preemption SIGTERMs one pod of a "
            "2-pod elastic PyTorchJob. The sweep varies which pod is hit, when within the second, worker "
            "shutdown, upload latency, failure detection and when propeller looks, for each plugin variant "
            "with distributed error aggregation on and off.\n"
        )
        render_sweep(
            demo_sweep(source),
            console,
            counterexamples=False,
            title="After a preemption: how often the node retries, fails for good, or succeeds silently",
        )
        path = _shipped_scenario("sibling_user_error_cleanup.textproto")
        source = read_scenario(path)
        console.print(
            f"\n[bold]2. A sibling's genuine error[/bold] ({Path(path).name}): one pod's worker raises a real "
            "user error, its pod exits 0, the job is Succeeded and the operator's cleanup SIGTERMs the other "
            "pod. A plugin that reports that SIGTERM must not mask the genuine error (upstream PR 2064).\n"
        )
        render_sweep(
            demo_sweep(source),
            console,
            counterexamples=False,
            title="After a sibling's genuine error and the cleanup: how often the genuine error is masked",
        )
        console.print(
            "\nCounterexample timelines: aggsim sweep <scenario name>, e.g. aggsim sweep preemption_during_training. "
            "The real pods, upstream plugin vs this one: aggsim demo --real."
        )
        return
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy: harmless
    warnings.filterwarnings("ignore", message="Configuring shared memory via")  # flytekit's own Elastic default
    with _real_run("demo"):  # the pods' temp files, and flytekit's sandbox, stay inside its dir
        from localjob.demo import run_demo
        from localjob.realpods import LocalJobError

        try:
            run_demo(_console())
        except LocalJobError as e:
            _fail(str(e))


def _shipped_scenario(name: str) -> str:
    from aggregation.scenario import SHIPPED_SCENARIOS

    return str(SHIPPED_SCENARIOS / name)


if __name__ == "__main__":  # pragma: no cover
    main()
