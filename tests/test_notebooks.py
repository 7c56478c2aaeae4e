"""The notebooks are committed without outputs and must execute cleanly, producing their figures."""

from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name, figures", [("design_review.ipynb", 14), ("replay_prefix.ipynb", 1)])
def test_notebook_executes_and_draws(name, figures, tmp_path, monkeypatch):
    """Run as a reader runs it: every cell, each figure drawn once, and nothing of ours left in the temp dir."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        "commit notebooks without outputs"
    )
    nbclient.NotebookClient(
        notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == figures  # each figure exactly once
    assert list(tmp_path.glob("aggsim-*")) == []  # e.g. the sample prefix the replay notebook builds


@pytest.mark.timeout(300)
def test_make_docs_renders_the_design_review_for_readers_without_jupyter(tmp_path):
    """`make docs`: one self-contained HTML file, every figure inlined once, nothing failed."""
    import re
    import shutil
    import subprocess
    import sys

    pytest.importorskip("nbconvert")
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    bin_dir = Path(sys.executable).parent
    result = subprocess.run(
        ["make", "-s", "docs", f"BIN={bin_dir}", "STAMP=", f"DOCS_DIR={tmp_path}"],
        cwd=NOTEBOOKS.parent,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    html = (tmp_path / "design-review.html").read_text()
    assert len(re.findall(r'<img[^>]+src="data:image/png;base64,', html)) == 14
    assert "Design review: a spot preemption" in html and "Traceback" not in html
