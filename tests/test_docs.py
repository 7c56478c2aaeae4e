"""Every `$ aggsim ...` command shown in README.md and docs/ runs, from the repository root, as documented.

A command exits 0 unless its line says `# exits N` (or `# a race: exits 0 or 1`). Commands that start real pods
run in `make test-real`; a `run-local SCENARIO --plugin P` line is the session's shared run of that command (made
with `--json` by `conftest.RealRuns`, for the conformance tests too), not a second one.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import AGGSIM, ROOT, SCENARIOS, missing_modules  # noqa: E402

pytest_plugins = ["pytester"]

SLOW = ("run-local", "demo --real", "calibrate")


def documented_commands():
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        in_block = False
        for number, line in enumerate(doc.read_text().splitlines(), start=1):
            if line.startswith("```"):
                in_block = not in_block
                continue
            match = re.match(r"\$ (aggsim .*)", line.strip()) if in_block else None
            if match:
                command, _, comment = match.group(1).partition("#")
                said = re.search(r"exits (\d)$", comment.strip())
                expected = (0, 1) if "exits 0 or 1" in comment else (int(said[1]),) if said else (0,)
                marks = (
                    [pytest.mark.slow, pytest.mark.plugin, pytest.mark.real] if any(s in command for s in SLOW) else []
                )
                if "--plot" in command and missing_modules(["matplotlib"]):
                    marks.append(pytest.mark.skip(reason="--plot needs matplotlib (the notebooks extra)"))
                found.append(pytest.param(command.strip(), expected, id=f"{doc.name}:{number}", marks=marks))
    return found


COMMANDS = documented_commands()


def _shared_real_run(args: list[str]):
    """(scenario, plugin) when `args` are `run-local SCENARIO --plugin P` for a shipped scenario, by name or path:
    a run the conformance tests make anyway (`conftest.RealRuns`), so the docs test reads it instead of another."""
    if len(args) != 4 or args[0] != "run-local" or args[2] != "--plugin":
        return None
    name = Path(args[1]).name.removesuffix(".textproto")
    if args[1] not in (name, f"scenarios/{name}.textproto") or not (SCENARIOS / f"{name}.textproto").is_file():
        return None
    return name, args[3]


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 12


@pytest.mark.timeout(600)
@pytest.mark.parametrize("command, expected", COMMANDS)
def test_documented_command_runs(command, expected, request, tmp_path):
    args = shlex.split(command)
    # the docs name files in /tmp a reader can open; the test's go with the test, and must be written
    written = [i for i, arg in enumerate(args) if arg.startswith("/tmp/")]
    for at in written:
        args[at] = str(tmp_path / Path(args[at]).name)
    shared = _shared_real_run(args[1:])
    if shared is not None:  # the same command's run, made once per session (it adds --json, which we ignore)
        result = request.getfixturevalue("real_runs").run(*shared)
        # exit 1: it disagreed, and its files stay on the machine, so say why (a run that printed no record makes
        # `evidence` say so, with its stderr)
        if result.returncode == 1 and 1 not in expected:
            raise AssertionError(f"{command}: the real run {result.evidence}")
    else:
        result = subprocess.run([AGGSIM, *args[1:]], cwd=ROOT, capture_output=True, text=True, timeout=580)
    assert result.returncode in expected, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr
    for at in written:
        assert Path(args[at]).is_file() and Path(args[at]).stat().st_size > 0, f"{command}: wrote nothing to {args[at]}"
        if args[at - 1] == "--plot":
            assert Path(args[at]).read_bytes().startswith(b"\x89PNG"), f"{command}: no plot drawn"


@pytest.mark.parametrize("command, expected", COMMANDS)
def test_documented_commands_paste_into_any_shell(command, expected):
    """zsh stops at an unquoted `attempts[0]...` ("no matches found") and bash expands it where a file matches: an
    argument holding a glob character is quoted as the docs show it."""
    for word in shlex.split(command):
        if any(c in word for c in "[]*?"):
            assert f"'{word}'" in command or f'"{word}"' in command, word


def test_the_readme_s_explain_sample_is_what_explain_prints():
    """The sample showed a table with file names cut short ("error-3f1c….pb"), which explain never prints: it is the
    command's output in a pipe, 80 columns wide, as written."""
    lines = (ROOT / "README.md").read_text().splitlines()
    command = "$ aggsim explain examples/prefixes/preempted_pair --retries 2"
    # the place where the command is followed by its output (the quick start shows the command alone)
    (start,) = [i for i, line in enumerate(lines) if line == command and lines[i + 1] != "```"]
    sample = lines[start + 1 : lines.index("```", start)]
    env = {**os.environ, "COLUMNS": "80"}
    shown = subprocess.run([AGGSIM, *shlex.split(command)[2:]], cwd=ROOT, capture_output=True, text=True, env=env)
    assert shown.stdout.splitlines() == sample


def test_example_prefixes_are_what_their_generator_writes(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import make_prefixes
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(make_prefixes, "HERE", tmp_path)
    make_prefixes.main()
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(ROOT / "examples") for p in (ROOT / "examples" / "prefixes").rglob("*") if p.is_file()
    )
    assert fresh == committed
    for relative in fresh:
        assert (tmp_path / relative).read_bytes() == (ROOT / "examples" / relative).read_bytes()


def test_the_docs_stand_alone_and_the_semantics_reference_points_at_real_modules():
    """Nothing outside the repository is cited (no path climbs out of it), and each rule's home in our code exists."""
    texts = [(ROOT / "README.md").read_text()] + [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    assert not any(re.search(r"(^|[\s(`\[])\.\./", text) for text in texts)
    semantics = (ROOT / "docs" / "propeller-semantics.md").read_text()
    homes = set(re.findall(r"`(aggregation/[a-z_]+\.py)`", semantics))
    assert len(homes) >= 8
    for home in homes:
        assert (ROOT / home).is_file(), home
    assert "v1.16.8" in semantics and "remote_file_output_reader.go" in semantics


def documented_tests():
    """The ```python blocks of docs/unit-tests.md that define tests (not the one calling a placeholder task)."""
    text = (ROOT / "docs" / "unit-tests.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return [b for b in blocks if "def test_" in b and "run_my_task_that_fails" not in b]


def test_the_unit_test_guide_s_examples_pass_as_written(pytester):
    """What a user copies from docs/unit-tests.md runs as a test file of its own, from outside the repository (the
    scenario by name, the hypothesis draws the model refuses skipped). A path into the repository's scenarios/ and
    an example that failed on one draw in six both used to be there. Hypothesis is derandomized and held to a few
    examples: this checks the examples, not the properties (tests/test_generated.py does)."""
    blocks = documented_tests()
    assert len(blocks) >= 4
    pytester.makeconftest(
        "from hypothesis import settings\n"
        "settings.register_profile('docs', max_examples=8, derandomize=True)\n"
        "settings.load_profile('docs')\n"
    )
    pytester.makepyfile(**{f"test_doc_example_{index}": block for index, block in enumerate(blocks)})
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=600)
    result.assert_outcomes(passed=sum(block.count("def test_") for block in blocks))
