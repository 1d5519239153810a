"""Layering (docs/design.md): agents/ knows nothing of envs/.

The agents, the return math and the losses import without Ray (they run in learners and runners
alike, and in notebooks).
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import sys
sys.modules["ray"] = None  # importing ray now raises ImportError
import agents.agent, agents.cores, agents.heads, agents.torsos, agents.layers
import learners.returns, learners.terms, learners.impala, learners.ppo, learners.optim
top = {m.split('.')[0] for m, mod in sys.modules.items() if mod is not None}
print(sorted(top & {'envs', 'ray', 'scripts'}))
"""


def test_agents_and_losses_import_without_ray_or_envs():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"agents/losses pulled in {out.stdout.strip()}"
