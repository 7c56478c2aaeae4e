import importlib.util

import pytest


def pytest_collection_modifyitems(config, items):
    """Tests of the plugin need flytekit and torch (the `plugin` extra); say so instead of failing to import."""
    missing = [m for m in ("torch", "flytekit", "flytekitplugins.kfpytorch") if importlib.util.find_spec(m) is None]
    if not missing:
        return
    skip = pytest.mark.skip(reason=f"plugin extra not installed ({', '.join(missing)})")
    for item in items:
        if "plugin" in item.keywords:
            item.add_marker(skip)
