"""The linter (ruff, configured in pyproject.toml) is part of the suite.

A change that adds an unused import, an undefined name, unsorted imports, a line over 100
characters or a docstring out of the Google convention fails here, on CI as anywhere.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        # On CI the test extra is installed, so a missing ruff is a broken set-up, not a skip.
        if os.environ.get("CI"):
            pytest.fail("ruff is not installed although CI is set: .ci/run installs '.[test]', "
                        "which brings it")
        pytest.skip("ruff is not installed (pip install -e '.[test]' brings it)")
    out = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
