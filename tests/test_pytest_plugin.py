"""The pytest plugin, tested the way users meet it: in a separate pytest run (pytester)."""

import re
from pathlib import Path

import pytest

from aggregation.propeller import NodeState

pytest_plugins = ["pytester"]


def test_plugin_is_registered_through_the_entry_point(pytester):
    result = pytester.runpytest("--trace-config", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*aggregation*pytest_plugin*"])


def test_user_can_assert_the_winner_in_a_few_lines(pytester):
    pytester.makepyfile(
        """
        from aggregation.pytest_plugin import assert_verdict

        def test_preemption_beats_the_consequence(error_prefix):
            error_prefix.add("train-worker-1", recoverable=True, offset=0.0)
            error_prefix.add("train-worker-0", code="USER:RuntimeError", offset=0.05)
            assert_verdict(error_prefix.explain(retries=2), worker="train-worker-1", decision="RETRY",
                           kind="USER", recoverable=True, task_phase="RETRYABLE_FAILURE")

        def test_untimestamped_document_wins(error_prefix):
            error_prefix.add("train-worker-0", offset=5.0, recoverable=True)
            error_prefix.add("train-worker-1", offset=None)
            assert_verdict(error_prefix.explain(retries=3), worker="train-worker-1", decision="FAIL")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_failure_message_shows_the_ranking_and_the_rule(pytester):
    pytester.makepyfile(
        """
        from aggregation.pytest_plugin import assert_verdict

        def test_wrong_expectation(error_prefix):
            error_prefix.add("pod-a", offset=1.0, name="error-a.pb")
            error_prefix.add("pod-b", offset=1.0, name="error-b.pb", recoverable=True)
            assert_verdict(error_prefix.explain(), worker="pod-b")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*error worker: expected 'pod-b', got 'pod-a'*",
            "*rule: tie on timestamp, broken by listing order (first listed wins)*",
            "*-> error-a.pb:*worker=pod-a*",
            "*   error-b.pb:*worker=pod-b*",
        ]
    )


def test_validating_error_files_written_by_user_code(pytester):
    pytester.makepyfile(
        """
        from aggregation.documents import error_document_bytes
        from aggregation.pytest_plugin import assert_valid_error_files

        def test_my_task_writes_good_error_files(tmp_path):
            (tmp_path / "error-1.pb").write_bytes(error_document_bytes(code="USER:X", message="m", worker="w",
                                                                       timestamp_ns=10**18))
            assert_valid_error_files(tmp_path)

        def test_missing_timestamp_is_caught(tmp_path):
            (tmp_path / "error-1.pb").write_bytes(error_document_bytes(code="USER:X", message="m", worker="w"))
            assert_valid_error_files(tmp_path)
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*error-1.pb: timestamp: `timestamp` is unset*"])


def test_scenario_assertion(pytester):
    from pathlib import Path

    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "preemption_during_training.textproto"
    pytester.makepyfile(
        f"""
        from aggregation.pytest_plugin import assert_scenario

        def test_upstream_is_silent():
            assert_scenario({str(scenario)!r}, plugin="upstream", final_phase="SUCCEEDED_SILENTLY", attempts=1)

        def test_wrong():
            assert_scenario({str(scenario)!r}, plugin="recoverable", final_phase="SUCCEEDED_SILENTLY")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*final phase: expected SUCCEEDED_SILENTLY, got RETRIED_THEN_SUCCEEDED*", "*SIGTERM (kubelet: preemption)*"]
    )


# --- careless use: refused with a clear message, never a silent pass or a write outside the prefix -------------


@pytest.mark.parametrize("name", ["/tmp/elsewhere.pb", "../outside.pb", "a/../../outside.pb", ""])
def test_a_name_that_leaves_the_prefix_is_refused(tmp_path, name):
    from aggregation.pytest_plugin import ErrorPrefix

    prefix = ErrorPrefix(tmp_path / "prefix")
    with pytest.raises(ValueError, match="name"):
        prefix.add("w", name=name)
    assert not (tmp_path / "outside.pb").exists()
    assert list((tmp_path / "prefix").iterdir()) == []


def test_a_nested_key_stays_inside(tmp_path):
    from aggregation.pytest_plugin import ErrorPrefix

    prefix = ErrorPrefix(tmp_path / "prefix")
    assert prefix.add("w", name="errors/error-1.pb") == tmp_path / "prefix" / "errors" / "error-1.pb"


@pytest.mark.parametrize(
    "field, value",
    [("worker", 7), ("code", 1.5), ("message", None), ("offset", "soon"), ("offset", True), ("recoverable", "no")],
)
def test_wrongly_typed_arguments_say_which_one(tmp_path, field, value):
    from aggregation.pytest_plugin import ErrorPrefix

    with pytest.raises(TypeError, match=field):
        ErrorPrefix(tmp_path).add(**{"worker": "w", field: value})


@pytest.mark.parametrize(
    "field, value",
    [
        ("offset", float("nan")),
        ("offset", 1e300),  # used to overflow converting to nanoseconds
        ("offset", 10**400),  # used to overflow in math.isfinite
        ("offset", 1e13),  # past year 9999 (a Timestamp flytekit cannot write): used to be protobuf's own error
        ("offset", -1e18),
        ("origin", "user"),  # flytekit writes USER or SYSTEM
        ("worker", "pod-\udc80"),  # a lone surrogate is no UTF-8: used to be a UnicodeEncodeError
        ("message", "\ud800"),
        ("name", "."),  # the prefix itself, not an object key: used to be IsADirectoryError
        ("name", "errors/"),
        ("name", "error\0.pb"),
        ("name", "e" * 300 + ".pb"),  # longer than a file name may be: the OS error, named
        # what `aggsim validate` refuses in a document, add() does not write (flytekit writes none such)
        ("offset", -1e9),  # a 1995 stamp: before 2000, it beats every real file (one range, 2000-9999, for any)
        ("code", ""),
        ("code/origin", "USER:RuntimeError"),  # with origin SYSTEM, below
    ],
)
def test_a_value_flytekit_could_not_write_is_refused_naming_the_argument(tmp_path, field, value):
    from aggregation.pytest_plugin import ErrorPrefix

    prefix = ErrorPrefix(tmp_path / "prefix")
    arguments = (
        {"worker": "w", "code": value, "origin": "SYSTEM"} if field == "code/origin" else {"worker": "w", field: value}
    )
    with pytest.raises(ValueError, match=f"ErrorPrefix.add: {field}") as caught:
        prefix.add(**arguments)
    assert "\n" not in str(caught.value)
    assert list(prefix.path.iterdir()) == []


def test_a_name_through_a_symbolic_link_out_of_the_prefix_is_refused(tmp_path):
    from aggregation.pytest_plugin import ErrorPrefix

    prefix = ErrorPrefix(tmp_path / "prefix")
    (tmp_path / "outside").mkdir()
    (prefix.path / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(ValueError, match="leads out of the prefix"):
        prefix.add("w", name="link/error-x.pb")
    assert list((tmp_path / "outside").iterdir()) == []


def test_add_names_and_codes_files_as_flytekit_s_entrypoint_does(tmp_path):
    """flytekit `entrypoint.py`: `_build_error_file_name` and `_get_worker_name` give `error-<uuid>.pb` and the
    pod's name together (with `_F_DES`) or `error.pb` and no name; `_dispatch_execute` writes code `SYSTEM` for
    a system error, recoverable or not. What `add` writes therefore passes `aggsim validate`'s checks."""
    from aggregation.pytest_plugin import ErrorPrefix, assert_valid_error_files

    prefix = ErrorPrefix(tmp_path / "prefix")
    first = prefix.add(offset=1.0, code="USER:First")
    assert first.name == "error.pb"
    assert prefix.add(offset=2.0, code="USER:Second") == first  # no _F_DES: one shared file, the last writer's
    assert prefix.explain(strategy="default").error.code == "USER:Second"
    system = prefix.add("train-worker-1", origin="SYSTEM", recoverable=True)
    assert system.name.startswith("error-") and prefix.explain().read.candidates[0].error.code == "SYSTEM"
    assert prefix.add("train-worker-1", origin="SYSTEM").name != system.name  # each add is a file of its own
    assert_valid_error_files(prefix.path)
    assert_valid_error_files(system)  # one file, as `aggsim validate FILE`


@pytest.mark.parametrize("counter", ["retries", "attempts", "system_failures"])
@pytest.mark.parametrize("value, error", [(-1, ValueError), (2**32, ValueError), (1.5, TypeError)])
def test_counters_outside_flyte_s_uint32_are_refused(tmp_path, counter, value, error):
    from aggregation.pytest_plugin import ErrorPrefix

    with pytest.raises(error, match=counter):
        ErrorPrefix(tmp_path).explain(**{counter: value})


def test_assertions_that_check_nothing_are_refused(tmp_path):
    from aggregation.pytest_plugin import ErrorPrefix, assert_scenario, assert_valid_error_files, assert_verdict

    prefix = ErrorPrefix(tmp_path / "p")
    with pytest.raises(TypeError, match="at least one expectation"):
        assert_verdict(prefix)
    with pytest.raises(TypeError, match="final_phase or attempts"):
        assert_scenario("preemption_during_training")
    with pytest.raises(pytest.fail.Exception, match="no error files"):
        assert_valid_error_files(tmp_path / "p")
    assert_valid_error_files(tmp_path / "p", allow_empty=True)


def test_no_error_fails_where_propeller_s_read_fails_the_round(tmp_path):
    """flyteplugins `remote_file_output_reader.go`: a file that does not decode, or one over `maxDownloadMBs`, is a Go
    error from `ReadError`, so the round fails with no verdict (docs/propeller-semantics.md); after enough such
    rounds the workflow aborts. No error is reported, and that is no success: `no_error` used to pass."""
    from aggregation.pytest_plugin import ErrorPrefix, assert_verdict

    undecodable = ErrorPrefix(tmp_path / "undecodable")
    undecodable.add("w", name="error-x.pb")
    (undecodable.path / "error-x.pb").write_bytes(b"\xff\xff\xff")
    with pytest.raises(pytest.fail.Exception, match="expected no error, but propeller's read fails the round"):
        assert_verdict(undecodable.explain(), no_error=True)
    too_large = ErrorPrefix(tmp_path / "too-large")
    too_large.add(message="m" * (2 * 2**20 + 1))
    with pytest.raises(pytest.fail.Exception, match="fails the round"):
        assert_verdict(too_large.explain(strategy="default"), no_error=True)
    assert_verdict(ErrorPrefix(tmp_path / "empty").explain(), no_error=True, task_phase="SUCCEEDED")


def test_a_failure_message_names_the_files_the_default_reader_never_reads(tmp_path):
    """As `aggsim explain` does: "no error file" next to per-worker files says the deployment runs aggregation."""
    from aggregation.pytest_plugin import ErrorPrefix, assert_verdict

    prefix = ErrorPrefix(tmp_path / "prefix")
    prefix.add("train-worker-1", recoverable=True, name="error-1.pb")
    prefix.add("train-worker-0", name="error-0.pb")
    with pytest.raises(pytest.fail.Exception) as caught:
        assert_verdict(prefix.explain(strategy="default", retries=2), decision="RETRY")
    assert "not read (the default reader reads only error.pb; pods name their files error-<uuid>.pb only when" in str(
        caught.value
    )
    assert "error-0.pb, error-1.pb (strategy='earliest' reads them)" in str(caught.value)
    assert "--strategy" not in str(caught.value)  # a test or a notebook has no command line to try


def test_the_helpers_refuse_arguments_of_the_wrong_kind_in_one_line(tmp_path):
    from aggregation.pytest_plugin import assert_scenario, assert_valid_error_files, assert_verdict

    with pytest.raises(TypeError, match="assert_verdict: expected an Explanation"):
        assert_verdict(str(tmp_path), no_error=True)
    with pytest.raises(TypeError, match="assert_valid_error_files: location must be a path"):
        assert_valid_error_files(5)
    with pytest.raises(TypeError, match="assert_scenario: attempts must be an int"):
        assert_scenario("preemption_during_training", attempts="1")  # used to fail with "expected 1, got 1"
    with pytest.raises(TypeError, match="attempts must be an int"):
        assert_scenario("preemption_during_training", attempts=True)  # used to pass as 1
    with pytest.raises(ValueError, match="final_phase must be one of SUCCEEDED, SUCCEEDED_SILENTLY"):
        assert_scenario("preemption_during_training", final_phase="succeeded_silently")
    # used to fail every explanation with "expected retry, got RETRY"
    with pytest.raises(
        ValueError, match=r"^assert_verdict: decision must be one of SUCCEED, RETRY, FAIL, WAIT, got 'retry'$"
    ):
        assert_verdict(str(tmp_path), decision="retry")
    with pytest.raises(ValueError, match=r"^assert_verdict: task_phase must be one of QUEUED, RUNNING, SUCCEEDED, "):
        assert_verdict(str(tmp_path), task_phase="Succeeded")
    assert_scenario("preemption_during_training", plugin="upstream", final_phase="SUCCEEDED_SILENTLY", attempts=1)


@pytest.mark.parametrize(
    "arguments, error, named",
    [
        ({"retries": -2}, ValueError, "retries must be an integer in [0, 4294967295]"),  # used to wrap and retry
        ({"retries": True}, TypeError, "retries"),
        ({"retries": 1.5}, TypeError, "retries"),
        ({"retries": None}, TypeError, "retries"),
        # a system failure is one of the node's attempts (the CLI's --system-failures refused it; the API did not)
        ({"state": NodeState(attempts=1, system_failures=2)}, ValueError, "system_failures (2) cannot exceed attempts"),
        ({"strategy": "latest"}, ValueError, "strategy must be one of earliest, default"),
        ({"config": None}, TypeError, "config must be a PropellerConfig"),
        ({"state": (1, 0)}, TypeError, "state must be a NodeState"),
    ],
)
def test_explain_prefix_refuses_a_caller_s_mistake_naming_the_argument(tmp_path, arguments, error, named):
    """The documented Python API checks what the CLI's options check (Flyte's counters are uint32): a value of the
    wrong type is a TypeError, one out of range a ValueError."""
    from aggregation import explain_prefix

    with pytest.raises(error, match=re.escape(named)):
        explain_prefix(str(tmp_path), **arguments)


def test_explain_prefix_takes_a_path_object(tmp_path):
    from aggregation import explain_prefix
    from aggregation.pytest_plugin import ErrorPrefix

    ErrorPrefix(tmp_path).add("w", recoverable=True)
    assert explain_prefix(tmp_path, retries=1).decision.decision.value == "RETRY"


def test_two_prefix_objects_on_one_directory_never_overwrite_each_other_s_files(tmp_path):
    """Each names its per-worker files by a count of its own: the second used to replace the first's file."""
    from aggregation.pytest_plugin import ErrorPrefix

    first, second = ErrorPrefix(tmp_path), ErrorPrefix(tmp_path)
    assert first.add("w", code="USER:First") != second.add("w", code="USER:Second")
    assert len(list(tmp_path.iterdir())) == 2


def test_an_offset_before_2000_is_refused_with_the_range_add_takes(tmp_path):
    from aggregation.pytest_plugin import ErrorPrefix

    for offset in (-1e9, -1e11):  # once 1-9999 was named while 2000 was the bound
        with pytest.raises(ValueError, match="within years 2000-9999"):
            ErrorPrefix(tmp_path).add("w", offset=offset)


# --- what a test suite must not be told: a coin flip certified, a file never read, a shipped file played instead --


def test_a_verdict_that_rests_on_a_tie_of_drawn_names_must_hold_whichever_file_lists_first(tmp_path):
    """flyteplugins `remote_file_output_reader.go` `earliestFileErrorReader.ReadError` keeps the first listed of files
    whose stamps tie (`earliest.After(ts)`), and flytekit `entrypoint.py` names them `error-<uuid4().hex>.pb`: which
    one a real store lists first is chance. An assertion that holds only in the order `add` happened to name them
    used to pass every run; it holds when every order agrees, and `accept_listing_order` checks the order listed."""
    from aggregation.pytest_plugin import ErrorPrefix, assert_verdict

    prefix = ErrorPrefix(tmp_path / "tie")
    prefix.add("train-worker-0", code="USER:RuntimeError", offset=0)
    prefix.add("train-worker-1", recoverable=True, offset=0)
    explanation = prefix.explain(retries=2)
    winner = explanation.error.worker
    loser = {"train-worker-0": "train-worker-1", "train-worker-1": "train-worker-0"}[winner]
    with pytest.raises(pytest.fail.Exception) as caught:
        assert_verdict(explanation, worker=winner)
    said = str(caught.value)
    assert said.startswith(f"assert_verdict(worker={winner!r}): holds only because the store lists error-")
    assert f"error worker: expected {winner!r}, got {loser!r}" in said and "accept_listing_order=True" in said
    ranking = [line for line in said.splitlines() if line.startswith(("-> ", "   "))]
    assert ranking[0].startswith("-> error-") and f"worker={loser}" in ranking[0]  # the order it was listed in
    with pytest.raises(pytest.fail.Exception, match=r"^assert_verdict\(recoverable=False\): holds only because"):
        assert_verdict(explanation, recoverable=explanation.error.recoverable)
    with pytest.raises(pytest.fail.Exception, match="holds only because"):
        assert_verdict(explanation, decision=explanation.decision.decision.value)  # RETRY or FAIL by the order
    assert_verdict(explanation, worker=winner, accept_listing_order=True)
    assert_verdict(explanation, kind="USER")  # both files say USER: the tie changes nothing asserted


def test_a_tie_between_names_the_test_chose_is_the_test_s_order(tmp_path):
    """Names given with `name=` are not drawn: their listing order is the test's choice (the listing-order rule itself
    is what such a test checks), so only the order listed counts."""
    from aggregation.pytest_plugin import ErrorPrefix, assert_verdict

    prefix = ErrorPrefix(tmp_path / "chosen")
    prefix.add("pod-a", offset=1.0, name="error-a.pb")
    prefix.add("pod-b", offset=1.0, name="error-b.pb", recoverable=True)
    explanation = prefix.explain()
    assert [key for key, _ in explanation.if_listed_first()] == ["error-b.pb"]
    assert_verdict(explanation, worker="pod-a", decision="FAIL")


def test_per_worker_files_the_default_reader_never_reads_fail_the_assertion(tmp_path):
    """Pods name their files error-<uuid>.pb only when `_F_DES` is set, which propeller does with aggregation on
    (flytekit `entrypoint.py` `_build_error_file_name`), and then reads with the earliest strategy: a passing verdict
    of the default reader over such files says nothing about any deployment, unless the test says the flag changed
    under running pods."""
    from aggregation.pytest_plugin import ErrorPrefix, assert_verdict

    prefix = ErrorPrefix(tmp_path / "prefix")
    prefix.add("train-worker-0", code="USER:RuntimeError")
    explanation = prefix.explain(strategy="default")
    with pytest.raises(pytest.fail.Exception, match="holds only because the default reader never reads error-"):
        assert_verdict(explanation, decision="SUCCEED", task_phase="SUCCEEDED")
    assert_verdict(explanation, decision="SUCCEED", allow_unread=True)
    assert_verdict(prefix.explain(strategy="earliest"), decision="FAIL")


def test_a_failure_message_escapes_what_a_document_or_name_holds(tmp_path):
    """A worker name with a newline used to print as a second, forged ranking line."""
    from aggregation.pytest_plugin import ErrorPrefix, assert_verdict

    prefix = ErrorPrefix(tmp_path / "prefix")
    prefix.add("train-worker-1\n-> error-FAKE.pb: winner", offset=0)
    prefix.add("train-worker-0", offset=1)
    with pytest.raises(pytest.fail.Exception) as caught:
        assert_verdict(prefix.explain(), worker="train-worker-0")
    lines = str(caught.value).splitlines()
    assert not any(line.startswith("-> error-FAKE.pb") for line in lines)
    assert any("worker=train-worker-1\\x0a-> error-FAKE.pb: winner" in line for line in lines)


def test_add_refuses_a_worker_in_error_pb_as_flytekit_never_writes_one(tmp_path):
    from aggregation.pytest_plugin import ErrorPrefix

    with pytest.raises(ValueError, match="never in error.pb"):
        ErrorPrefix(tmp_path).add("train-worker-0", name="error.pb")


def test_assert_scenario_names_what_it_played_and_plays_what_the_cli_plays(tmp_path, monkeypatch):
    """A path never falls back to a shipped scenario of the same name (run from elsewhere, a test used to play the
    shipped file and say only "got SUCCEEDED_SILENTLY"); the failure names the file, plugin and flag; the flag and a
    deployment's files are taken as `aggsim simulate --aggregation --propeller-config` takes them."""
    from aggregation.pytest_plugin import assert_scenario

    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        pytest.fail.Exception, match="^assert_scenario: preemption_during_training.textproto: cannot read: No such file"
    ):
        assert_scenario("preemption_during_training.textproto", final_phase="SUCCEEDED")
    with pytest.raises(pytest.fail.Exception) as caught:
        assert_scenario("sibling_user_error_cleanup", plugin="seed-pr", final_phase="RETRIED_THEN_SUCCEEDED")
    assert "sibling_user_error_cleanup.textproto (plugin seed-pr, aggregation on): final phase: expected" in str(
        caught.value
    )
    assert_scenario(
        "sibling_user_error_cleanup", plugin="seed-pr", aggregation=False, final_phase="RETRIED_THEN_SUCCEEDED"
    )
    config = tmp_path / "propeller.yaml"
    config.write_text("storage: {limits: {maxDownloadMBs: 2}}\n")  # the flag unset: Flyte's default, off
    assert_scenario(
        "sibling_user_error_cleanup", plugin="seed-pr", propeller_config=[config], final_phase="RETRIED_THEN_SUCCEEDED"
    )
    with pytest.raises(ValueError, match="plugin must be one of upstream, seed-pr, recoverable, got 'Upstream'"):
        assert_scenario("preemption_during_training", plugin="Upstream", attempts=1)
    with pytest.raises(TypeError, match="propeller_config is a list of files"):
        assert_scenario("preemption_during_training", propeller_config=str(config), attempts=1)


def test_a_point_the_model_refuses_fails_assert_scenario_with_the_model_s_line(tmp_path):
    from aggregation.pytest_plugin import assert_scenario

    text = (Path(__file__).parent.parent / "aggregation/scenarios/preemption_by_pod_deletion.textproto").read_text()
    early = tmp_path / "early.textproto"
    early.write_text(text.replace("at_seconds: 30.6", "at_seconds: 0.5").replace("at_seconds: 10 ", "at_seconds: 0.1 "))
    with pytest.raises(pytest.fail.Exception, match="the model refuses to play it: attempt 0's job turned Failed at"):
        assert_scenario(str(early), final_phase="RETRIED_THEN_SUCCEEDED")


def test_assert_valid_error_files_fails_in_one_line_on_a_location_that_is_not_there(tmp_path):
    from aggregation.pytest_plugin import assert_valid_error_files

    for allow_empty in (False, True):
        with pytest.raises(pytest.fail.Exception, match="assert_valid_error_files: .*does-not-exist: no such file"):
            assert_valid_error_files(tmp_path / "does-not-exist", allow_empty=allow_empty)


def test_a_location_or_scenario_that_is_not_there_is_one_line_in_the_report(pytester):
    """The failure a user reads is the tool's line: `assert_scenario` let a missing scenario's ScenarioError out with
    the plugin's and the loader's source, and `assert_valid_error_files` failed inside its `except`, so pytest
    printed the store's error, "During handling of the above exception", then its own."""
    pytester.makepyfile(
        """
        from aggregation.pytest_plugin import assert_scenario, assert_valid_error_files

        def test_missing_prefix(tmp_path):
            assert_valid_error_files(tmp_path / "nope")

        def test_missing_scenario():
            assert_scenario("no_such_scenario", final_phase="SUCCEEDED")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert "During handling" not in text and "Traceback" not in text and "def resolve_scenario_path" not in text
    result.stdout.fnmatch_lines(
        [
            "assert_valid_error_files: */nope: no such file or directory",
            "assert_scenario: no_such_scenario: no such file, and no shipped scenario of that name (shipped: *",
        ],
        consecutive=False,
    )


def test_error_document_bytes_writes_a_stamp_flytekit_never_writes(tmp_path):
    """docs/unit-tests.md sends a test that needs such a file to `error_document_bytes`: milliseconds written as
    seconds (past year 9999) used to raise "Timestamp is not valid"; `aggsim validate` now gets to say what is wrong."""
    from aggregation.documents import error_document_bytes
    from aggregation.validate import check_document

    data = error_document_bytes(timestamp_ns=1_796_000_000_000 * 10**9)
    assert any(finding.check == "timestamp" for finding in check_document("error.pb", data))
