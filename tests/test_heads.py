"""Contract tests over every head in HEADS (docs/design.md, "Contracts").

Plus the behaviour that makes each head what it is: multi_head routes gradients to the selected task
only; a learnt-context head never sees the task ID; a task-ID head depends on it.
"""

import dataclasses

import pytest
import torch

import agents.heads.multi_head  # noqa: F401  registers "multi_head"
import agents.heads.multiplicative  # noqa: F401  registers "multiplicative"
from agents.heads import HEADS

T, B, H, A, K = 4, 3, 16, 5, 6

# Every registered head with default options, plus the non-default variants worth covering.
VARIANTS = [(name, {}) for name in HEADS.names()] + [
    ("multiplicative", {"context": "learnt"}),
    ("multiplicative", {"form": "diagonal"}),
    ("multiplicative", {"form": "output_scale"}),
    ("multiplicative", {"form": "full", "init": "hypernetwork"}),
    ("multiplicative", {"form": "low_rank", "rank": 4}),
    ("multiplicative", {"context": "learnt", "form": "low_rank", "rank": 2, "context_size": 8}),
]


def _make(name, options, seed=0):
    torch.manual_seed(seed)
    return HEADS.get(name)(H, A, K, **options)


def _inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, B, H, generator=g), torch.randint(0, K, (T, B), generator=g)


def _perturb_all(module, seed=2):
    """Move every parameter off its initial value (some start at zero by design)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))


@pytest.mark.parametrize("name", HEADS.names())
def test_config_fields_have_defaults(name):
    cls = HEADS.get(name)
    assert isinstance(cls.reads_task_id, bool)
    cfg = cls.Config()  # every field has a default
    head = cls(H, A, K, **dataclasses.asdict(cfg))
    assert isinstance(head.reads_task_id, bool)


@pytest.mark.parametrize("name,options", VARIANTS)
def test_shapes_and_task_id_contract(name, options):
    head = _make(name, options)
    h, task_id = _inputs()
    logits, value = head(h, task_id)
    assert logits.shape == (T, B, A) and value.shape == (T, B)
    assert torch.isfinite(logits).all() and torch.isfinite(value).all()
    if head.reads_task_id:
        with pytest.raises(ValueError, match="task_id"):
            head(h, None)
    else:
        logits_none, value_none = head(h, None)
        torch.testing.assert_close(logits_none, logits)
        torch.testing.assert_close(value_none, value)
    # One actor step (T=1) equals the same step inside an unroll.
    l1, v1 = head(h[:1], task_id[:1] if head.reads_task_id else None)
    torch.testing.assert_close(l1, logits[:1])
    torch.testing.assert_close(v1, value[:1])


@pytest.mark.parametrize("name,options", VARIANTS)
def test_gradients_reach_every_parameter_and_the_input(name, options):
    head = _make(name, options)
    _perturb_all(head)
    h, _ = _inputs()
    h.requires_grad_(True)
    task_id = torch.arange(T * B).reshape(T, B) % K  # every task appears
    logits, value = head(h, task_id)
    (logits.square().sum() + value.square().sum()).backward()
    for pname, p in head.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname
    assert h.grad.abs().sum() > 0


def test_unknown_head_option_fails_with_a_sentence():
    with pytest.raises(ValueError, match="context"):
        HEADS.get("multiplicative")(H, A, K, context="oracle")
    with pytest.raises(ValueError, match="form"):
        HEADS.get("multiplicative")(H, A, K, form="cubic")


def test_multi_head_routes_gradients_to_the_selected_task_only():
    head = _make("multi_head", {})
    h, _ = _inputs()
    task_id = torch.full((T, B), 2)
    task_id[0, 0] = 4
    logits, value = head(h, task_id)
    (logits.sum() + value.sum()).backward()
    for grad in (head.weight.grad, head.bias.grad):
        assert grad[2].abs().sum() > 0 and grad[4].abs().sum() > 0
        for k in (0, 1, 3, 5):
            assert torch.count_nonzero(grad[k]) == 0
    # And the output of a step is exactly that task's linear head.
    k = 4
    expected = h[0, 0] @ head.weight[k] + head.bias[k]
    torch.testing.assert_close(torch.cat([logits[0, 0], value[0, 0, None]]), expected)


def test_multi_head_output_depends_on_the_task():
    head = _make("multi_head", {})
    h, _ = _inputs()
    a = head(h, torch.zeros(T, B, dtype=torch.long))[0]
    b = head(h, torch.ones(T, B, dtype=torch.long))[0]
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("form", ["full", "diagonal", "output_scale", "low_rank"])
def test_learnt_context_ignores_the_task_id(form):
    head = _make("multiplicative", {"context": "learnt", "form": form})
    _perturb_all(head)
    assert head.reads_task_id is False
    assert type(head).reads_task_id is True  # class default; the instance decides
    h, task_id = _inputs()
    reference = head(h, None)
    for other in (task_id, (task_id + 1) % K, torch.zeros_like(task_id)):
        out = head(h, other)
        torch.testing.assert_close(out[0], reference[0])
        torch.testing.assert_close(out[1], reference[1])


@pytest.mark.parametrize("form", ["full", "diagonal", "output_scale", "low_rank"])
def test_task_id_context_changes_the_output(form):
    head = _make("multiplicative", {"context": "task_id", "form": form})
    _perturb_all(head)
    assert head.reads_task_id is True
    h, task_id = _inputs()
    logits_a, value_a = head(h, task_id)
    logits_b, value_b = head(h, (task_id + 1) % K)
    assert not torch.allclose(logits_a, logits_b)
    assert not torch.allclose(value_a, value_b)
    # Steps with the same task ID give the same result wherever they sit in the batch.
    same = head(h, torch.full((T, B), 3))[0]
    torch.testing.assert_close(same[0, 0], head(h[:1, :1], torch.full((1, 1), 3))[0][0, 0])


@pytest.mark.parametrize("context", ["task_id", "learnt"])
def test_multiplicative_head_matches_the_paper_written_out_step_by_step(context):
    """Section 6.1's pi, V = M(h, c), with eq. 1 and the context written out as loops.

    c = relu(A u + a), u the one-hot task ID (Fig. 4b) or the core output h (Fig. 4c);
    f_k = sum_ij c_i W_ijk h_j + sum_i U_ki c_i + sum_j V_kj h_j + b_k; logits f_0..A-1,
    value f_A.
    """
    head = _make("multiplicative", {"context": context, "form": "full"})
    _perturb_all(head)
    h, task_id = _inputs()
    logits, value = head(h, task_id)
    A_, a = head.context_net.weight.detach(), head.context_net.bias.detach()
    W, U = head.mi.W.detach(), head.mi.z_proj.weight.detach()
    V, b = head.mi.x_proj.weight.detach(), head.mi.x_proj.bias.detach()
    for t in range(T):
        for n in range(B):
            x = h[t, n]
            u = torch.zeros(K) if context == "task_id" else x
            if context == "task_id":
                u[task_id[t, n]] = 1.0
            c = [max(0.0, float(sum(A_[i, j] * u[j] for j in range(len(u))) + a[i]))
                 for i in range(len(a))]
            for k in range(A + 1):
                f = float(b[k]) + sum(float(V[k, j] * x[j]) for j in range(H))
                f += sum(c[i] * float(U[k, i]) for i in range(len(c)))
                f += sum(c[i] * float(W[i, j, k] * x[j]) for i in range(len(c)) for j in range(H))
                got = (logits[t, n, k] if k < A else value[t, n]).detach()
                assert abs(float(got) - f) < 1e-4 * max(1.0, abs(f)), (t, n, k)


def test_linear_head_orthogonal_init_starts_uniform_with_a_unit_value_layer():
    from agents.heads.linear import LinearHead

    torch.manual_seed(0)
    head = LinearHead(256, 6, init="orthogonal")
    # orthogonal rows of norm 0.01 for the logits, 1 for the value; zero biases
    assert torch.allclose(head.policy.weight.norm(dim=1), torch.full((6,), 0.01), atol=1e-6)
    assert torch.allclose(head.value.weight.norm(), torch.tensor(1.0), atol=1e-6)
    gram = head.policy.weight @ head.policy.weight.T
    assert torch.allclose(gram, 1e-4 * torch.eye(6), atol=1e-9)
    assert not head.policy.bias.any() and not head.value.bias.any()
    h = torch.tanh(torch.randn(5, 3, 256))  # an LSTM's output lies in (-1, 1)
    logits, _ = head(h)
    probs = torch.softmax(logits, -1)
    assert (probs - 1 / 6).abs().max() < 0.01  # the first policy is uniform
    torch.manual_seed(0)
    default = LinearHead(256, 6)
    assert default.policy.weight.norm(dim=1).min() > 0.1 and default.policy.bias.any()
