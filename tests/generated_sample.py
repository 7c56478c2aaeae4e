"""The seeded sample of playable generated scenarios that `test_generated_real.py` runs on real pods, drawn here in
an interpreter of its own: `python tests/generated_sample.py SEED SIZE` prints their textprotos as a JSON list.

Why a process of its own: hypothesis mixes constants it finds in every project module loaded into its draws, so
drawn inside pytest the sample for one seed would change with which test files were collected (`-k`, one file or
all). Here the modules loaded are always these, and string hashing is pinned (`PYTHONHASHSEED`), so a seed names
one sample for a given version of the code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def draw(seed: int, size: int) -> list[str]:
    """`size` playable scenarios drawn from `seed`, past any whose simulated attempt outlasts a real one (which only
    playing the model tells: `localjob.runner.OutlastsARealAttempt`)."""
    from google.protobuf import text_format
    from hypothesis import HealthCheck, Phase, assume, given, settings
    from hypothesis import seed as with_seed

    from aggregation.scenario import ModelRefusal
    from aggregation.strategies import scenarios, spec_of
    from localjob.runner import OutlastsARealAttempt, check_playable

    drawn = []

    @with_seed(seed)
    @settings(
        max_examples=size,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(scenarios(playable=True))
    def take(message):
        try:
            check_playable(spec_of(message))
        except OutlastsARealAttempt:
            assume(False)
        except ModelRefusal:
            pass  # the model refuses the point itself: played, and reported as refused
        drawn.append(text_format.MessageToString(message))

    take()
    return drawn


def sample(seed: int, size: int) -> list:
    """The sample as `aggsim.v1.Scenario` messages, drawn by this file in a fresh interpreter."""
    from google.protobuf import text_format

    from aggregation.proto.aggsim.v1 import scenario_pb2 as pb

    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    command = [sys.executable, str(Path(__file__)), str(seed), str(size)]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"drawing the sample for seed {seed} failed:\n{done.stderr}")
    return [text_format.Parse(text, pb.Scenario()) for text in json.loads(done.stdout)]


if __name__ == "__main__":
    print(json.dumps(draw(int(sys.argv[1]), int(sys.argv[2]))))
