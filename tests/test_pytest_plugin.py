"""The pytest plugin, tested the way users meet it: in a separate pytest run (pytester)."""

import pytest

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


@pytest.mark.parametrize("field, value", [("worker", 7), ("code", 1.5), ("message", None), ("offset", "soon"),
                                          ("offset", float("nan")), ("offset", True)])
def test_wrongly_typed_arguments_say_which_one(tmp_path, field, value):
    from aggregation.pytest_plugin import ErrorPrefix

    with pytest.raises(TypeError, match=field):
        ErrorPrefix(tmp_path).add(**{"worker": "w", field: value})


@pytest.mark.parametrize("counter", ["retries", "attempts", "system_failures"])
@pytest.mark.parametrize("value", [-1, 2**32, 1.5])
def test_counters_outside_flyte_s_uint32_are_refused(tmp_path, counter, value):
    from aggregation.pytest_plugin import ErrorPrefix

    with pytest.raises(ValueError, match=counter):
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
