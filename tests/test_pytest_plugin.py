"""The pytest plugin, tested the way users meet it: in a separate pytest run (pytester)."""

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
