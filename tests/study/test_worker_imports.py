"""What a Ray worker imports to run a trial (`autotune.study.workers`, the trainable's and the
rung and verification tasks' module) and what a recipe reader imports: not scipy.stats (~0.7 s
a process; the divergence tests import it where they run), so a trial reaches its worker and
the CLI answers without it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_SCRIPT = """
import json, sys
import autotune.study.workers, autotune.recipe
before = "scipy.stats" in sys.modules
from autotune.recipe.divergence_chance import share_test, sign_test
p = sign_test(6, 0), share_test(6, 8, 0, 10)
print(json.dumps({"before": before, "after": "scipy.stats" in sys.modules, "p": p}))
"""


@pytest.mark.integration
def test_a_worker_and_a_recipe_reader_import_no_scipy_stats_until_a_test_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] is False and got["after"] is True
    assert got["p"][0] == pytest.approx(2 / 2**6) and got["p"][1] < 0.01
