"""The distribution's promises: `aggregation` stands alone, the console script exists."""

import subprocess
import sys
import textwrap

from conftest import ROOT  # noqa: E402


def test_aggregation_imports_without_torch_or_flytekit():
    """The propeller model must run where neither torch nor flytekit is installed."""
    code = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "flytekit", "flytekitplugins"):
                    raise ImportError(f"blocked: {name}")
        sys.meta_path.insert(0, Block())
        import aggregation, aggregation.cli, aggregation.explain, aggregation.readers, aggregation.propeller
        assert not any(m.split(".")[0] in ("torch", "flytekit") for m in sys.modules)
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_console_script_is_installed():
    from pathlib import Path

    aggsim = Path(sys.executable).parent / "aggsim"
    result = subprocess.run([str(aggsim), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "explain" in result.stdout and "demo" in result.stdout


def _imported_top_level_names(package: str) -> dict[str, set[str]]:
    """Every top-level module each file of `package` imports (statically, including imports inside functions)."""
    import ast

    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


def test_the_plugin_ships_nothing_of_the_simulator_or_the_runner():
    """`plugin/` is what goes into a task image: it must not import the model or the local job runner."""
    offenders = {
        path: sorted(names & {"aggregation", "localjob"})
        for path, names in _imported_top_level_names("plugin").items()
        if names & {"aggregation", "localjob"}
    }
    assert offenders == {}


def test_the_model_does_not_depend_on_the_runner_or_the_plugin():
    """Data flows one way: the real runner uses the model's world; the model never reaches back."""
    offenders = {
        path: sorted(names & {"localjob", "plugin"})
        for path, names in _imported_top_level_names("aggregation").items()
        if names & {"localjob", "plugin"} and path != "aggregation/cli.py"  # the CLI's run-local and demo --real
    }
    assert offenders == {}


def test_operator_rules_and_the_attempt_loop_exist_once():
    """One source of truth per rule: nothing outside world.py/execution.py/operator.py decides a job's
    condition, loops over attempts, or sends the kubelet's SIGKILL."""
    import re

    patterns = {
        "job condition decided": re.compile(
            r"condition\s*=\s*(JobCondition\.(SUCCEEDED|FAILED)|\"(Succeeded|Failed)\")"
        ),
        "attempt loop": re.compile(r"for attempt in range\("),
        "kubelet SIGKILL after grace": re.compile(r"\+\s*(spec\.|self\.)?grace\b"),
    }
    homes = {"aggregation/operator.py", "aggregation/execution.py", "aggregation/world.py"}
    offenders = []
    for path in sorted(list((ROOT / "aggregation").rglob("*.py")) + list((ROOT / "localjob").rglob("*.py"))):
        relative = str(path.relative_to(ROOT))
        if relative in homes:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for what, pattern in patterns.items():
                if pattern.search(line):
                    offenders.append(f"{relative}:{number}: {what}: {line.strip()}")
    assert offenders == []


def test_the_readme_layout_table_lists_every_module():
    """A newcomer reads the layout table first: every module of the three packages has a row."""
    readme = (ROOT / "README.md").read_text()
    modules = [
        str(path.relative_to(ROOT))
        for package in ("plugin", "aggregation", "localjob")
        for path in sorted((ROOT / package).glob("*.py"))
        if path.name != "__init__.py" or package == "plugin"
    ]
    missing = [module for module in modules if f"`{module}`" not in readme]
    assert missing == []
