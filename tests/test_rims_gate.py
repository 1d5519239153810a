"""The RIMs core's gated communication (``comm_gate``) and the runs saved before it."""

from __future__ import annotations

import json

import pytest
import torch

from agents.cores import CORES


def _unroll(core, T: int = 60, B: int = 4, seed: int = 0) -> torch.Tensor:
    x = torch.randn(T, B, 256, generator=torch.Generator().manual_seed(seed))
    core.eval()  # no dropout
    with torch.no_grad():
        y, _ = core(x, core.initial_state(B), torch.zeros(T, B, dtype=torch.bool))
    return y


def test_the_gated_write_keeps_h_bounded_where_the_papers_residual_grows():
    """Large weights make the ungated state grow; the gated write keeps it under 2.

    Weights 8x their initial size give the ungated loop (inactive RIMs' kept h, read back
    through the values) a gain above 1; the gated write adds at most 1 per element to h~.
    """
    for gate in (True, False):
        torch.manual_seed(0)
        core = CORES["rims"](256, comm_gate=gate, k_active=5)
        with torch.no_grad():
            for p in core.parameters():
                p.mul_(8)
        y = _unroll(core)
        if gate:
            assert y.abs().max() <= 2.0  # |h_new| < 1 (an LSTM's), |write| < 1
        else:
            assert not bool(y.abs().max() < 100.0)  # grows, or is no longer finite


def test_the_write_is_tanh_of_its_half_times_the_sigmoid_of_the_gate_half():
    """The write is tanh of its half of the projection, times the sigmoid of the gate's half.

    A zero write (tanh(0)) or a closed gate (sigmoid(-big)) leaves h~: the ungated core with
    a zero output projection. The gate adds num_units * (heads * value + 2) * unit_size.
    """
    torch.manual_seed(1)
    gated = CORES["rims"](256)
    ungated = CORES["rims"](256, comm_gate=False)
    H = gated.config.unit_size
    state = {k: v for k, v in gated.state_dict().items() if k not in ("comm_out", "comm_bias")}
    ungated.load_state_dict({**state, "comm_out": torch.zeros_like(ungated.comm_out)})
    reference = _unroll(ungated)
    for half, value in ((slice(None, H), 0.0), (slice(H, None), -1e4)):
        closed = CORES["rims"](256)
        closed.load_state_dict(gated.state_dict())
        with torch.no_grad():
            closed.comm_bias[..., half] = value
            closed.comm_out[..., half] = 0.0
        torch.testing.assert_close(_unroll(closed), reference)
    assert not torch.allclose(_unroll(gated), reference)  # the open gate does write
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    c = gated.config
    assert count(gated) - count(ungated) == c.num_units * (
        c.comm_heads * c.comm_value_size + 2) * c.unit_size


@pytest.mark.parametrize("fmt", [3, 4])
def test_a_rims_run_saved_before_the_gate_loads_ungated(small_cfg, tmp_path, fmt):
    """A RIMs run saved before the gate loads ungated.

    A run directory or checkpoint of format 3 holds ungated weights: it loads with
    comm_gate false; from format 4 the saved config says it.
    """
    import yaml

    from learners.config.schema import save_config, to_dict
    from learners.runtime.run_dir import RunDir

    cfg = small_cfg(**{"agent.core": "rims", "agent.core_options": "{}"})
    saved = to_dict(cfg)
    if fmt == 3:  # what mira wrote then: no comm_gate key
        del saved["agent"]["core_options"]["comm_gate"]
    run = tmp_path / f"format{fmt}"
    (run / "checkpoints").mkdir(parents=True)
    save_config(cfg, run / "config.yaml")
    (run / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    (run / "meta.json").write_text(json.dumps({"seed": 0, "config_format": fmt}))
    expected = fmt == 4
    assert RunDir.open(run).load_config().agent.core_options.comm_gate is expected
    state = {"config": saved} if fmt == 3 else {"config": saved, "config_format": fmt}
    loaded = RunDir.checkpoint_config(run / "checkpoints" / "x.pt", state, [])
    assert loaded.agent.core_options.comm_gate is expected
