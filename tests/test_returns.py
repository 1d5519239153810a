"""Reference tests for learners/algorithms/returns.py.

Naive loops in the papers' notation, analytic special cases, episode boundaries and terminated vs.
truncated steps.
"""

import pytest
import torch

from learners.algorithms.returns import gae, vtrace


def discounted_returns(rewards, discounts, bootstrap_value):
    """Reference: the n-step return bootstrapped at the end, ``G_t = r_t + discounts_t G_{t+1}``."""
    acc, out = bootstrap_value, []
    for t in reversed(range(rewards.shape[0])):
        acc = rewards[t] + discounts[t] * acc
        out.append(acc)
    return torch.stack(out[::-1], dim=0).detach()


DT = torch.float64


def _inputs(T=6, B=3, seed=0, gamma=0.9, p_done=0.2):
    """Random time-major inputs with some episode ends (discount 0) mid-unroll."""
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(T, B, generator=g, dtype=DT) < p_done
    return dict(
        log_rhos=torch.randn(T, B, generator=g, dtype=DT),
        discounts=gamma * (~done).to(DT),
        rewards=torch.randn(T, B, generator=g, dtype=DT),
        values=torch.randn(T, B, generator=g, dtype=DT),
        bootstrap_value=torch.randn(B, generator=g, dtype=DT),
    )


def _clip(x, threshold):
    return x if threshold is None else min(threshold, x)


def naive_vtrace(log_rhos, discounts, rewards, values, bootstrap_value,
                 rho_bar, pg_rho_bar, c_bar, lam):
    """V-trace as IMPALA eq. 1, with explicit loops, one scalar at a time.

    n = T - s, gamma^{t-s} replaced by the product of per-step discounts; pg advantage from
    section 4.1.
    """
    T, B = values.shape
    vs = torch.zeros(T, B, dtype=DT)
    adv = torch.zeros(T, B, dtype=DT)
    for b in range(B):
        V = [values[t, b].item() for t in range(T)] + [bootstrap_value[b].item()]
        pi_mu = [log_rhos[t, b].exp().item() for t in range(T)]
        d = [discounts[t, b].item() for t in range(T)]
        r = [rewards[t, b].item() for t in range(T)]
        for s in range(T):
            total = V[s]
            for t in range(s, T):
                disc_prod, c_prod = 1.0, 1.0
                for i in range(s, t):
                    disc_prod *= d[i]
                    c_prod *= lam * _clip(pi_mu[i], c_bar)
                delta = r[t] + d[t] * V[t + 1] - V[t]
                total += disc_prod * c_prod * _clip(pi_mu[t], rho_bar) * delta
            vs[s, b] = total
        for s in range(T):
            v_next = vs[s + 1, b].item() if s + 1 < T else V[T]
            adv[s, b] = _clip(pi_mu[s], pg_rho_bar) * (r[s] + d[s] * v_next - V[s])
    return vs, adv


def naive_gae(rewards, values, bootstrap_value, discounts, lam):
    """Schulman et al. eq. 16 as an explicit sum, per-step discounts, cut at episode ends."""
    T, B = values.shape
    V = torch.cat([values, bootstrap_value[None]])
    adv = torch.zeros(T, B, dtype=DT)
    for b in range(B):
        for t in range(T):
            weight = 1.0
            for k in range(t, T):
                delta = rewards[k, b] + discounts[k, b] * V[k + 1, b] - V[k, b]
                adv[t, b] += weight * delta
                weight *= discounts[k, b].item() * lam
    return adv


def naive_lambda_return(rewards, values, bootstrap_value, discounts, lam):
    """G^lam_t = r_t + gamma_t [(1 - lam) V(x_{t+1}) + lam G^lam_{t+1}], G^lam_T = V(x_T)."""
    T, _ = values.shape
    V = torch.cat([values, bootstrap_value[None]])
    G = torch.zeros_like(values)
    nxt = bootstrap_value
    for t in reversed(range(T)):
        G[t] = rewards[t] + discounts[t] * ((1 - lam) * V[t + 1] + lam * nxt)
        nxt = G[t]
    return G


# ----------------------------------------------------------------------------- V-trace


@pytest.mark.parametrize("lam", [1.0, 0.95, 0.5, 0.0])
@pytest.mark.parametrize(
    "rho_bar,pg_rho_bar,c_bar",
    [(1.0, 1.0, 1.0), (None, None, None), (2.0, 0.5, 0.9), (None, 1.0, 1.0)],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_vtrace_matches_paper_eq1(lam, rho_bar, pg_rho_bar, c_bar, seed):
    x = _inputs(T=7, B=3, seed=seed)
    out = vtrace(**x, clip_rho_threshold=rho_bar, clip_pg_rho_threshold=pg_rho_bar,
                 clip_c_threshold=c_bar, lambda_=lam)
    vs, adv = naive_vtrace(**x, rho_bar=rho_bar, pg_rho_bar=pg_rho_bar, c_bar=c_bar, lam=lam)
    torch.testing.assert_close(out.vs, vs)
    torch.testing.assert_close(out.pg_advantages, adv)
    assert out.vs.dtype == DT and out.vs.shape == (7, 3)


def test_vtrace_on_policy_lambda1_is_nstep_return():
    x = _inputs(seed=3)
    x["log_rhos"] = torch.zeros_like(x["log_rhos"])
    out = vtrace(**x)
    expected = discounted_returns(x["rewards"], x["discounts"], x["bootstrap_value"])
    torch.testing.assert_close(out.vs, expected)


def test_vtrace_gamma0_gives_rewards():
    x = _inputs(seed=4)
    x["log_rhos"] = torch.zeros_like(x["log_rhos"])
    x["discounts"] = torch.zeros_like(x["discounts"])
    out = vtrace(**x)
    torch.testing.assert_close(out.vs, x["rewards"])
    torch.testing.assert_close(out.pg_advantages, x["rewards"] - x["values"])


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.9])
def test_vtrace_rho1_is_lambda_return(lam):
    x = _inputs(seed=5)
    x["log_rhos"] = torch.zeros_like(x["log_rhos"])
    out = vtrace(**x, lambda_=lam)
    expected = naive_lambda_return(x["rewards"], x["values"], x["bootstrap_value"],
                                   x["discounts"], lam)
    torch.testing.assert_close(out.vs, expected)
    # On-policy V-trace minus V is GAE with the same lambda.
    g = gae(x["rewards"], x["values"], x["bootstrap_value"], x["discounts"], lambda_=lam)
    torch.testing.assert_close(out.vs - x["values"], g.advantages)


def test_vtrace_episode_end_cuts_dependence():
    x = _inputs(T=8, B=2, seed=6, p_done=0.0)
    k = 3
    x["discounts"][k] = 0.0
    before = vtrace(**x)
    y = {name: t.clone() for name, t in x.items()}
    g = torch.Generator().manual_seed(99)
    y["values"][k + 1:] += torch.randn(8 - k - 1, 2, generator=g, dtype=DT) * 10
    y["rewards"][k + 1:] += torch.randn(8 - k - 1, 2, generator=g, dtype=DT) * 10
    y["log_rhos"][k + 1:] += torch.randn(8 - k - 1, 2, generator=g, dtype=DT)
    y["bootstrap_value"] += 10.0
    after = vtrace(**y)
    torch.testing.assert_close(after.vs[: k + 1], before.vs[: k + 1])
    torch.testing.assert_close(after.pg_advantages[: k + 1], before.pg_advantages[: k + 1])
    assert not torch.allclose(after.vs[k + 1:], before.vs[k + 1:])


def _terminal_vs_truncated(fn):
    """Step 1 of 3 ends an episode; returns (terminated target, truncated target)."""
    gamma, v_final = 0.9, torch.tensor([5.0], dtype=DT)
    rewards = torch.tensor([[1.0], [2.0], [3.0]], dtype=DT)
    values = torch.tensor([[0.5], [0.7], [0.2]], dtype=DT)
    discounts = torch.tensor([[gamma], [0.0], [gamma]], dtype=DT)
    bootstrap = torch.tensor([4.0], dtype=DT)
    terminated = fn(rewards, values, bootstrap, discounts)
    # Truncation convention: the caller folds gamma * V(final_obs) into the reward.
    truncated_rewards = rewards.clone()
    truncated_rewards[1] += gamma * v_final
    truncated = fn(truncated_rewards, values, bootstrap, discounts)
    return terminated, truncated, rewards, gamma, v_final


@pytest.mark.parametrize("which", ["vtrace", "gae"])
def test_terminated_vs_truncated(which):
    def targets(r, v, bs, d):
        if which == "vtrace":
            return vtrace(torch.zeros_like(r), d, r, v, bs).vs
        return gae(r, v, bs, d, lambda_=1.0).returns

    term, trunc, r, gamma, v_final = _terminal_vs_truncated(targets)
    torch.testing.assert_close(term[1], r[1])
    torch.testing.assert_close(trunc[1], r[1] + gamma * v_final)
    torch.testing.assert_close(trunc[0], r[0] + gamma * trunc[1])
    torch.testing.assert_close(term[2], trunc[2])  # the next episode is unaffected


@pytest.mark.parametrize("which", ["vtrace", "gae"])
def test_inputs_untouched_and_outputs_detached(which):
    x = {k: v.clone().requires_grad_(True) for k, v in _inputs(seed=7).items()}
    copies = {k: v.detach().clone() for k, v in x.items()}
    if which == "vtrace":
        outs = vtrace(**x, clip_rho_threshold=None, lambda_=0.9)
    else:
        outs = gae(x["rewards"], x["values"], x["bootstrap_value"], x["discounts"])
    for out in outs:
        assert not out.requires_grad and out.grad_fn is None
    for k, v in x.items():
        assert torch.equal(v.detach(), copies[k]), k


# --------------------------------------------------------------------------------- GAE


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_gae_matches_paper_eq16(lam, seed):
    x = _inputs(T=7, B=3, seed=seed)
    out = gae(x["rewards"], x["values"], x["bootstrap_value"], x["discounts"], lambda_=lam)
    expected = naive_gae(x["rewards"], x["values"], x["bootstrap_value"], x["discounts"], lam)
    torch.testing.assert_close(out.advantages, expected)
    torch.testing.assert_close(out.returns, out.advantages + x["values"])


def test_gae_lambda0_is_td_error():
    x = _inputs(seed=8)
    out = gae(x["rewards"], x["values"], x["bootstrap_value"], x["discounts"], lambda_=0.0)
    v_next = torch.cat([x["values"][1:], x["bootstrap_value"][None]])
    torch.testing.assert_close(
        out.advantages, x["rewards"] + x["discounts"] * v_next - x["values"]
    )


def test_gae_lambda1_is_return_minus_value():
    x = _inputs(seed=9)
    out = gae(x["rewards"], x["values"], x["bootstrap_value"], x["discounts"], lambda_=1.0)
    G = discounted_returns(x["rewards"], x["discounts"], x["bootstrap_value"])
    torch.testing.assert_close(out.advantages, G - x["values"])
    torch.testing.assert_close(out.returns, G)


def test_gae_episode_end_cuts_dependence():
    x = _inputs(T=8, B=2, seed=10, p_done=0.0)
    k = 4
    x["discounts"][k] = 0.0
    before = gae(x["rewards"], x["values"], x["bootstrap_value"], x["discounts"])
    values, rewards = x["values"].clone(), x["rewards"].clone()
    values[k + 1:] += 3.0
    rewards[k + 1:] -= 2.0
    after = gae(rewards, values, x["bootstrap_value"] + 7.0, x["discounts"])
    torch.testing.assert_close(after.advantages[: k + 1], before.advantages[: k + 1])
    torch.testing.assert_close(after.returns[: k + 1], before.returns[: k + 1])


# ------------------------------------------------------------------------------ shapes


@pytest.mark.parametrize("T,B", [(1, 1), (1, 4), (5, 1)])
def test_edge_shapes(T, B):
    x = _inputs(T=T, B=B, seed=11)
    out = vtrace(**x, lambda_=0.9)
    vs, adv = naive_vtrace(**x, rho_bar=1.0, pg_rho_bar=1.0, c_bar=1.0, lam=0.9)
    assert out.vs.shape == out.pg_advantages.shape == (T, B)
    torch.testing.assert_close(out.vs, vs)
    torch.testing.assert_close(out.pg_advantages, adv)
    g = gae(x["rewards"], x["values"], x["bootstrap_value"], x["discounts"])
    assert g.advantages.shape == g.returns.shape == (T, B)


def test_shape_mismatch_raises():
    x = _inputs(T=4, B=3)
    with pytest.raises(ValueError, match="bootstrap_value"):
        vtrace(**{**x, "bootstrap_value": x["bootstrap_value"][:2]})
    with pytest.raises(ValueError, match=r"\[T, B\]"):
        gae(x["rewards"], x["values"][:3], x["bootstrap_value"], x["discounts"])


@pytest.mark.parametrize("T", [1, 2, 3, 8, 37, 128])
def test_reverse_scan_equals_the_loop_in_a_fixed_number_of_operators(T):
    """The doubling scan is the loop x_t = d_t + a_t x_{t+1} (x_T = 0) up to rounding.

    Episode ends (a_t = 0) included; its operators depend on T only, not on B.
    """
    from learners.algorithms.returns import reverse_scan
    from scripts.bench.dispatch import OpCounter

    g = torch.Generator().manual_seed(T)
    deltas = torch.randn(T, 5, generator=g)
    coefficients = torch.rand(T, 5, generator=g) * (torch.rand(T, 5, generator=g) > 0.1)
    acc, expected = torch.zeros(5), []
    for t in reversed(range(T)):
        acc = deltas[t] + coefficients[t] * acc
        expected.append(acc)
    torch.testing.assert_close(reverse_scan(deltas, coefficients),
                               torch.stack(expected[::-1]), rtol=1e-5, atol=1e-5)

    def ops(B: int) -> int:
        with OpCounter() as counter:
            reverse_scan(torch.randn(T, B), torch.rand(T, B))
        return counter.total

    assert ops(3) == ops(300) <= 12 * max(1, (T - 1).bit_length())
