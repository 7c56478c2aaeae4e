"""The distribution's promises: `aggregation` stands alone, the console script exists."""

import subprocess
import sys
import textwrap


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
