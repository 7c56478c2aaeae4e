"""Explain one output prefix: which error propeller reports, and whether the node retries.

Data flows one way: storage (list/read the prefix) -> reader (pick the error) -> propeller (task
phase, then the node's retry decision). `explain_prefix` is the public entry point; `Explanation`
renders the JSON `aggsim explain --json` prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Optional, Union

from aggregation.gotime import rfc3339_nanos
from aggregation.propeller import (
    UINT32_MAX,
    JobCondition,
    NodeDecision,
    NodeState,
    PropellerConfig,
    TaskOutcome,
    TaskPhase,
    node_decision,
    task_outcome,
)
from aggregation.readers import (
    CANONICAL_ERROR_FILE,
    DEFAULT,
    EARLIEST,
    RULE_FUTURES_HEAD_FAILED,
    RULE_TIE,
    STRATEGIES,
    Candidate,
    EarliestErrorReader,
    ObservedError,
    ReadResult,
    reader_for,
    too_large,
)
from aggregation.replica_env import is_drawn_file_name, is_per_worker_file
from aggregation.storage import OutputPrefix, StorageError, StoreUnreachable, open_prefix

OUTPUTS_FILE = "outputs.pb"
#: flytepropeller v1.16.8 `nodes/task/future_file_reader.go` `implicitFutureFileName`: a dynamic task's sub-workflow
FUTURES_FILE = "futures.pb"
#: `FutureFileReader.Exists`: flytestdlib `errors.Wrapf(utils.ErrorCodeUser, err, ...)`, "[code] message, caused by:"
FUTURES_HEAD_FAILED = "[User] Failed to do HEAD on futures file., caused by: "


class DynamicTaskPrefix(ValueError):
    """The prefix holds `futures.pb`: propeller takes the task for a dynamic task's parent and runs its sub-workflow
    instead of reading its errors (`nodes/task/handler.go` `invokePlugin`), which the model does not play."""


NOTE_KEYS = 5  # how many keys a note names before it counts the rest (`--json` lists them all)

__all__ = ["Explanation", "explain_prefix", "rfc3339_nanos"]


@dataclass(frozen=True)
class Explanation:
    """Everything `aggsim explain` reports for one prefix."""

    location: str
    read: ReadResult
    outcome: TaskOutcome
    decision: NodeDecision
    requests: int
    #: the prefix's error files the reader did not read: the earliest reader's listed keys that do not end in `.pb`;
    #: with `note_unread`, the default reader's other `error*.pb` keys (which it never lists)
    not_read: tuple[str, ...] = ()
    #: the node's decision for another task outcome, on the same retry budget (`if_listed_first`)
    decide: Optional[Callable[[TaskOutcome], NodeDecision]] = field(default=None, compare=False, repr=False)

    def if_listed_first(self) -> tuple[tuple[str, "Explanation"], ...]:
        """The earliest reader keeps the first listed of the files whose stamps tie (`earliest.After(ts)`): for each
        other file tied with the winner, what propeller concludes had the store listed that one first (the ranking
        then lists it first). Empty when nothing ties. Every candidate was read whole (a read that fails stops the
        round before any winner), so only the order and the pick change."""
        return tuple((tied.path, self._listed_first(tied)) for tied in self._tied())

    def if_listed_first_by_chance(self) -> tuple[tuple[str, "Explanation"], ...]:
        """`if_listed_first` for the tied files whose place in the listing is chance: flytekit draws both their names
        and the winner's at random as it writes them (`entrypoint.py` `_build_error_file_name`: error-<uuid4
        hex>.pb), so another run of the same job may list any of them first. Any other name is taken to keep its
        place: the master's `error.pb` does (`error-` sorts before `error.`), and a name a test chose is its order."""
        return tuple((tied.path, self._listed_first(tied)) for tied in self._tied_by_chance())

    def chance_verdicts(self) -> tuple[tuple[tuple[str, ...], "Explanation"], ...]:
        """What other runs of the same job may conclude instead: for each verdict another listing order of the tied
        drawn files gives, the files that give it (in listing order) and one such explanation. Played once per
        distinct error, however many files tie (the node's decision reads the error's code, kind and
        recoverability). Empty when no order is chance."""
        groups: dict[tuple, tuple[list[str], Explanation]] = {}
        played: dict[tuple, Explanation] = {}
        for tied in self._tied_by_chance():
            error = (tied.error.code, tied.error.kind, tied.error.recoverable)
            if error not in played:
                played[error] = self._listed_first(tied)
            other = played[error]
            groups.setdefault(other.verdict, ([], other))[0].append(tied.path)
        return tuple((tuple(keys), other) for keys, other in groups.values())

    @property
    def verdict(self) -> tuple:
        """What propeller concludes, as the node's history records it: the task phase and the node's decision, code
        and kind (the kind counts a system failure against its own budget: `propeller.node_decision`)."""
        return self.outcome.phase, self.decision.decision, self.decision.code, self.decision.kind

    def _tied(self) -> list[Candidate]:
        read, winner = self.read, self.read.selected
        if read.strategy != EARLIEST or winner is None or RULE_TIE not in read.rule or self.decide is None:
            return []
        return [
            c for c in read.candidates if c is not winner and c.error is not None and c.order_key == winner.order_key
        ]

    def _tied_by_chance(self) -> list[Candidate]:
        if self.read.selected is None or not is_drawn_file_name(self.read.selected.path):
            return []
        return [tied for tied in self._tied() if is_drawn_file_name(tied.path)]

    def _listed_first(self, tied: Candidate) -> "Explanation":
        """This explanation had the store listed `tied` first."""
        read = self.read
        candidates = tuple(
            replace(c, selected=c is tied) for c in (tied, *(c for c in read.candidates if c is not tied))
        )
        rule = EarliestErrorReader._rule(list(candidates), [c.order_key for c in candidates], 0)
        listed = replace(read, candidates=candidates, error=tied.error, rule=rule)
        outcome = task_outcome(JobCondition.SUCCEEDED, listed)  # an error file decides: outputs are not looked at
        return replace(self, read=listed, outcome=outcome, decision=self.decide(outcome))

    @property
    def not_read_reason(self) -> Optional[str]:
        """Why the reader left `not_read` alone, and what per-worker names among them say about the deployment."""
        if not self.not_read:
            return None
        if self.read.strategy == EARLIEST:
            return "the earliest reader keeps only keys ending in .pb"
        why = f"the default reader reads only {CANONICAL_ERROR_FILE}"
        if self.per_worker_files_not_read:
            why += "; pods name their files error-<uuid>.pb only when propeller runs with aggregation on"
        return why

    @property
    def per_worker_files_not_read(self) -> bool:
        """The default reader left per-worker files (`error-<uuid>.pb`) alone: the pods ran for a propeller with
        aggregation on, whose earliest reader would read them (each front end says how to ask for it)."""
        return self.read.strategy != EARLIEST and any(is_per_worker_file(key) for key in self.not_read)

    @property
    def not_read_note(self) -> Optional[str]:
        """One line for people: why, and the first few keys (`NOTE_KEYS`)."""
        if not self.not_read:
            return None
        shown = ", ".join(self.not_read[:NOTE_KEYS])
        more = f" and {len(self.not_read) - NOTE_KEYS} more" if len(self.not_read) > NOTE_KEYS else ""
        return f"not read ({self.not_read_reason}): {shown}{more}"

    @property
    def error(self) -> Optional[ObservedError]:
        """The error propeller reports for the task: the winning file's, or one a rule makes
        (OutputsNotFound when outputs are declared and `outputs.pb` is missing); None when it succeeds."""
        return self.outcome.error

    @property
    def winning_file_error(self) -> Optional[ObservedError]:
        """What the error reader took from the file it picked (None: no file was picked)."""
        return self.read.error

    def _node_json(self) -> Optional[dict[str, Any]]:
        node = None
        if self.decision.decision.value in ("SUCCEED", "RETRY", "FAIL", "WAIT"):  # WAIT: rounds that fail for ever
            node = {"decision": self.decision.decision.value, "code": None, "kind": None}
            if self.decision.decision.value == "FAIL":
                node.update(code=self.decision.code, kind=self.decision.kind)
        return node

    def to_json(self) -> dict[str, Any]:
        node = self._node_json()
        return {
            "strategy": self.read.strategy,
            "files": [
                {
                    "path": c.path,
                    "timestamp": rfc3339_nanos(c.error.timestamp_ns) if c.error else None,
                    "code": c.error.code if c.error else None,
                    "kind": c.error.kind if c.error else None,
                    "recoverable": c.error.recoverable if c.error else None,
                    "worker": c.error.worker if c.error else None,
                    "selected": c.selected,
                    "problem": c.problem,
                }
                for c in self.read.candidates
            ],
            "error": _error_json(self.error, "error file" if self.error is self.read.error else "propeller rule"),
            "winning_file": _error_json(self.read.error, "error file"),
            "rule": self.read.rule,
            "round_error": self.read.round_error,
            "task_phase": self.outcome.phase.value,
            "node": node,
            "object_store_requests": self.requests,
            "not_read": list(self.not_read),
            "not_read_reason": self.not_read_reason,
            "by_listing_order": [
                {"files": list(keys), "task_phase": other.outcome.phase.value, "node": other._node_json()}
                for keys, other in self.chance_verdicts()
            ],
        }


def _error_json(error: Optional[ObservedError], source: str) -> Optional[dict[str, Any]]:
    if error is None:
        return None
    return {
        "code": error.code,
        "message": error.message,
        "kind": error.kind,
        "recoverable": error.recoverable,
        "timestamp": rfc3339_nanos(error.timestamp_ns),
        "worker": error.worker,
        "path": error.path,
        "source": source,
    }


def explain_prefix(
    prefix: Union[str, "os.PathLike[str]", OutputPrefix],
    strategy: str = EARLIEST,
    outputs_declared: bool = False,
    retries: int = 0,
    state: NodeState = NodeState(),
    config: PropellerConfig = PropellerConfig(),
    note_unread: bool = True,
) -> Explanation:
    """What propeller concludes if it observes the PyTorchJob Succeeded now, for this output prefix.

    `prefix` is a path/URL (opened with fsspec) or an `OutputPrefix` (e.g. `MemoryPrefix`).
    Raises `StorageError` only when the prefix itself cannot be opened (missing directory, filesystem not installed),
    `StoreUnreachable` when this machine may not use the store or its copy of the prefix (credentials, network,
    permissions: no verdict), and `DynamicTaskPrefix` when it holds a dynamic task's `futures.pb`; every other
    problem with the files inside becomes part of the verdict.
    `note_unread` (as `aggsim explain` does): with the default reader, also list the prefix (a request propeller does
    not make, counted outside `requests`) for the error files that reader never reads; False skips that listing.
    """
    _check_arguments(prefix, strategy, retries, state, config)
    store = open_prefix(os.fspath(prefix)) if isinstance(prefix, (str, os.PathLike)) else prefix
    return explain_store(store, strategy, outputs_declared, retries, state, config, note_unread)


def explain_store(
    store: OutputPrefix,
    strategy: str,
    outputs_declared: bool,
    retries: int,
    state: NodeState,
    config: PropellerConfig,
    note_unread: bool = False,
) -> Explanation:
    """`explain_prefix` for an open store and arguments already checked (the simulator's propeller, every round)."""
    futures_failed = _head_futures(store, config)
    if futures_failed is not None:
        read = ReadResult(strategy, rule=RULE_FUTURES_HEAD_FAILED, round_error=futures_failed)
    else:
        read = reader_for(strategy, config.max_payload_bytes, config.store).read(store)
    outputs_exist, outputs_too_large = False, None
    if outputs_declared and read.error is None and read.round_error is None:
        try:
            size = store.head(OUTPUTS_FILE)
            outputs_exist = size is not None
            if size is not None and size > config.max_payload_bytes:  # RemoteFileOutputReader.Exists
                path = f"{store.location.rstrip('/')}/{OUTPUTS_FILE}"  # GetOutputPath: built, not listed
                # errors.Wrapf(ErrRemoteFileExceedsMaxSize, ...): the wrapped error's text follows
                outputs_too_large = too_large(path, size, config.max_payload_bytes)
        except StorageError as e:
            # RemoteFileOutputReader.Exists returns the HEAD's error as it is, and ValidateOutput passes it on
            read = ReadResult(read.strategy, read.candidates, None, read.rule, str(e), read.ignored)
    outcome = task_outcome(
        JobCondition.SUCCEEDED, read, outputs_declared, outputs_exist, outputs_too_large=outputs_too_large
    )
    if outcome.phase is TaskPhase.SUCCEEDED:
        # dynamic/handler.go `handleParentNode`: the task handler's success is checked for a futures file once more
        again = _head_futures(store, config, wrapped="")
        if again is not None:
            read = ReadResult(read.strategy, read.candidates, None, RULE_FUTURES_HEAD_FAILED, again, read.ignored)
            outcome = task_outcome(JobCondition.SUCCEEDED, read)
    decision = node_decision(outcome, retries, state, config)
    requests = store.requests.total
    not_read = read.ignored
    if note_unread and read.strategy == DEFAULT and futures_failed is None:  # no reader ran: nothing to note
        not_read = _other_error_files(store)
    decide = partial(node_decision, retries=retries, state=state, config=config)
    return Explanation(store.location, read, outcome, decision, requests, not_read, decide)


def _head_futures(
    store: OutputPrefix, config: PropellerConfig, wrapped: str = "failed to check existence of futures file: "
) -> Optional[str]:
    """`Handler.invokePlugin` on the plugin's success, before `ValidateOutput`: HEAD `<prefix>/futures.pb`
    (`FutureFileReader.Exists`). The Go error that fails the round when the HEAD does (`wrapped` is the task
    handler's `regErrors.Wrapf`; the dynamic handler's second look returns it unwrapped), or None. A futures file
    there makes the node a dynamic task's parent: `DynamicTaskPrefix`."""
    try:
        size = config.store.reaching(store).head(FUTURES_FILE)
    except StorageError as e:
        return f"{wrapped}{FUTURES_HEAD_FAILED}{e}"
    if size is not None:
        raise DynamicTaskPrefix(
            f"{store.location.rstrip('/')}/{FUTURES_FILE}: a dynamic task's sub-workflow: propeller runs it instead of "
            "reading the task's errors (nodes/task/handler.go invokePlugin), which the model does not play"
        )
    return None


def _check_arguments(prefix, strategy, retries, state, config) -> None:
    """A caller's mistake is one line naming the argument (the CLI's options are checked by click)."""
    if not isinstance(prefix, (str, os.PathLike)) and not hasattr(prefix, "list_pages"):
        raise TypeError(f"explain_prefix: prefix must be a path, a URL or an OutputPrefix, got {prefix!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"explain_prefix: strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if not isinstance(state, NodeState):
        raise TypeError(f"explain_prefix: state must be a NodeState, got {state!r}")
    if not isinstance(config, PropellerConfig):
        raise TypeError(f"explain_prefix: config must be a PropellerConfig, got {config!r}")
    # Flyte keeps these as uint32 (`RetryStrategy.retries`, `NodeStatus.Attempts` / `SystemFailures`)
    for label, value in (
        ("retries", retries),
        ("attempts", state.attempts),
        ("system_failures", state.system_failures),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"explain_prefix: {label} must be an integer in [0, {UINT32_MAX}], got {value!r}")
        if not 0 <= value <= UINT32_MAX:
            raise ValueError(f"explain_prefix: {label} must be an integer in [0, {UINT32_MAX}], got {value!r}")
    if state.system_failures > state.attempts:  # each system failure is one of the node's attempts
        raise ValueError(
            f"explain_prefix: system_failures ({state.system_failures}) cannot exceed attempts ({state.attempts})"
        )


def _other_error_files(store: OutputPrefix) -> tuple[str, ...]:
    """The `error*.pb` keys besides `error.pb`: what the earliest reader would read and the default one never
    lists. Pods name their files so (`error-<uuid>.pb`) only when propeller runs with aggregation on. A listing
    that fails leaves the note out: the verdict, reached with propeller's own requests, stands."""
    try:
        read_by_earliest, _ = reader_for(EARLIEST).listing(store)
        return tuple(key for key in read_by_earliest if key != CANONICAL_ERROR_FILE)
    except (StorageError, StoreUnreachable):
        return ()
