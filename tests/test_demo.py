"""The main job (`make demo`): the incident reproduced with real pods, and the fix shown to retry."""

import pytest

pytestmark = [pytest.mark.plugin, pytest.mark.real, pytest.mark.timeout(240)]


def test_demo_shows_silent_success_upstream_and_retry_with_the_plugin(tmp_path):
    """Upstream: empty prefix -> SUCCEEDED silently (handler.go ValidateOutput); ours: RETRY (executor.go)."""
    from rich.console import Console

    from localjob.demo import run_demo

    console = Console(record=True, width=120)
    upstream, recoverable = run_demo(console, work_dir=tmp_path)
    assert upstream.exit_code == 0 and upstream.files == ()
    assert upstream.explanation.decision.decision.value == "SUCCEED"
    assert recoverable.exit_code == 0 and len(recoverable.files) == 1
    assert recoverable.explanation.error.recoverable
    assert recoverable.explanation.decision.decision.value == "RETRY"
    text = console.export_text()
    assert "node SUCCEEDS" in text and "node RETRIES" in text
