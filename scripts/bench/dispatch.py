"""How launch-bound a learner update is: the operators it dispatches per collected agent step.

    python -m scripts.bench.learner configs/impala_atari.yaml env.game=Pong --count-ops

A GPU runs each operator as one or more kernel launches, and a small operator costs the host
about the same few microseconds to dispatch and launch whatever its size. So an update whose
operators are many and small leaves the GPU waiting on the host: its rate is set by how many
operators it dispatches, not by its arithmetic. This module counts them on CPU, where the
count is the same as on a GPU up to the fused kernels' internals (oneDNN's LSTM on CPU and
cuDNN's on CUDA are each one operator forward and one backward): every ATen operator that
reaches the dispatcher during one whole update (``Learner.update``: the batch's copy to the
device, the targets, every epoch's minibatches forward and backward, gradient clipping and
the optimizer steps), backward included, counted with a ``TorchDispatchMode``. Views
(``view``, ``select``, ``detach``, ...) are dispatched too but launch no kernel; they are
counted apart. The update is the second on the same batch, so the optimizer's state exists,
as in a run.

A ``TorchDispatchMode`` turns ``torch.compile`` off while it is active, so an update under
``learner.compile`` is counted from torch's profiler instead (``count_update_calls``): every
ATen operator not called by another one (as Python and the autograd engine dispatch them),
plus every kernel a compiled graph runs (inductor's generated kernels; the operators it
calls, such as convolutions and matrix products, are ATen operators and counted as such).
On the eager update of ``impala_atari_gpu.yaml`` the kernels the two count agree within 3%
(tests/test_compile.py holds them within 10% on a small one). ``--count-ops`` of a compiled
config prints the same update eager beside it, both by the profiler.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts every ATen operator dispatched while active (``counts``: by operator name)."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()
        self.views = 0  # of which views: no kernel runs

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func.overloadpacket)] += 1
        if func.is_view or func.overloadpacket is torch.ops.aten.detach:
            self.views += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        """Every operator dispatched so far."""
        return sum(self.counts.values())


def count_update_ops(update: Callable[[], object], steps: int) -> dict:
    """Operators one call of ``update``, a whole learner update of ``steps`` steps, dispatches.

    ``update`` runs twice, counted the second time, so the optimizer's state exists as in a
    run. Returns ``ops`` (all), ``kernels`` (all but views), both per step as
    ``ops_per_step`` and ``kernels_per_step``, and ``top``: the ten most dispatched operators
    with their counts.
    """
    update()
    with OpCounter() as counter:
        update()
    ops, kernels = counter.total, counter.total - counter.views
    return {"ops": ops, "kernels": kernels, "steps": steps, "ops_per_step": ops / steps,
            "kernels_per_step": kernels / steps, "top": counter.counts.most_common(10)}


# Operators that run no kernel of their own: allocations (the caching allocator, no launch)
# and ``lift_fresh`` (a constant handed through).
NO_KERNEL = {"aten::empty", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
             "aten::empty_like", "aten::lift_fresh"}


def _overloads(name: str) -> list:
    """The overloads of the ATen operator a profiler event names (``aten::slice``)."""
    op = getattr(torch.ops.aten, name.removeprefix("aten::"), None)
    return [getattr(op, o) for o in op.overloads()] if hasattr(op, "overloads") else []


def _is_view(name: str) -> bool:
    """An operator that only makes a view (``detach`` too, as ``OpCounter`` counts it)."""
    ops = _overloads(name)
    return name == "aten::detach" or any(o.is_view for o in ops)


def _is_composite(name: str) -> bool:
    """An operator with no kernel of its own: it runs as other operators (``to``, ``reshape``)."""
    found = []
    for o in _overloads(name):
        try:
            found.append(torch._C._dispatch_has_kernel_for_dispatch_key(
                o.name(), "CompositeImplicitAutograd"))
        except RuntimeError:  # an overload known only to TorchScript
            continue
    return bool(found) and all(found)


def _compiled(name: str) -> bool:
    """A kernel a compiled graph runs (inductor's C++ or Triton kernels)."""
    return "cpp_fused" in name or "triton_" in name


def _kernels(event) -> int:
    """The kernels an operator's event runs: its own, or its children's when it has none."""
    if _compiled(event.name):
        return 1
    if _is_composite(event.name):
        return sum(_kernels(c) for c in event.cpu_children
                   if c.name.startswith("aten::") or _compiled(c.name))
    return 0 if _is_view(event.name) or event.name in NO_KERNEL else 1


def count_update_calls(update: Callable[[], object], steps: int) -> dict:
    """``count_update_ops``'s figures from torch's profiler: it sees into compiled graphs.

    ``ops``: every ATen operator the profiler records with no operator or compiled kernel
    around it, and every compiled kernel (inductor's, profiled while this runs); ``kernels``:
    the kernels they run (an operator with none of its own counted by its children; views,
    allocations and constants as none), the figure ``OpCounter`` counts as not views;
    ``graphs``: the compiled graphs' calls; ``outside_graphs``: the kernels run outside them,
    and ``top_outside`` the operators that run most of those.
    ``update`` runs twice, counted the second time.
    """
    import torch._inductor.config as inductor
    from torch.profiler import ProfilerActivity, profile

    def counted(name: str) -> bool:
        return name.startswith("aten::") or _compiled(name)

    with inductor.patch({"cpp.enable_kernel_profile": True}):
        update()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            update()
    counts: collections.Counter = collections.Counter()
    beside: collections.Counter = collections.Counter()  # kernels outside graphs, by operator
    kernels = graphs = outside = 0
    for event in prof.events():
        if "CompiledFxGraph" in event.name:
            graphs += 1
        if not counted(event.name):
            continue
        outer, in_graph = event.cpu_parent, False
        while outer is not None and not counted(outer.name):
            in_graph = in_graph or "CompiledFxGraph" in outer.name
            outer = outer.cpu_parent
        if outer is not None:
            continue
        counts["compiled kernel" if _compiled(event.name) else event.name] += 1
        n = _kernels(event)
        kernels += n
        outside += 0 if in_graph else n
        if not in_graph and n:
            beside[event.name] += n
    ops = sum(counts.values())
    return {"ops": ops, "kernels": kernels, "steps": steps, "ops_per_step": ops / steps,
            "kernels_per_step": kernels / steps, "top": counts.most_common(10),
            "graphs": graphs, "outside_graphs": outside, "top_outside": beside.most_common(12)}


def describe(counts: dict) -> str:
    """One line: operators per collected step, kernels (views aside), and the update's totals."""
    line = (f"{counts['ops_per_step']:.2f} operators dispatched per collected step "
            f"({counts['kernels_per_step']:.2f} not views), {counts['ops']} in an update of "
            f"{counts['steps']} steps")
    if counts.get("graphs"):
        line += (f" (the profiler's count); {counts['graphs']} compiled graph calls and "
                 f"{counts['outside_graphs']} kernels outside them: "
                 f"{(counts['graphs'] + counts['outside_graphs']) / counts['steps']:.2f} per "
                 f"step if each graph ran as one CUDA graph")
    elif "graphs" in counts:
        line += " (the profiler's count)"
    return line
