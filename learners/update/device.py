"""Where the learner computes, and what leaves it: device choice, full float32, CPU copies.

``resolve_device`` picks the torch device ``learner.device`` names among the GPUs this
process may use; ``use_full_float32`` turns TensorFloat-32 off so a CUDA update equals the
CPU update up to summation order; ``to_cpu`` copies every tensor the learner hands out
(weights, optimizer state, checkpoints) so that none shares storage with its live tensors.
"""

from __future__ import annotations

import torch

from learners.config.typed_yaml import ConfigError


def resolve_device(name: str, reserved_gpus: int | None = None) -> torch.device:
    """The torch device ``learner.device`` names, given the GPUs this process may use.

    Args:
        name: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        reserved_gpus: how many GPUs Ray reserved for this learner actor (its ``num_gpus``);
            None where Ray does not place the learner (``runtime.num_runners: 0``, tests,
            ``mira bench``): every GPU the process sees is then its own.

    ``auto`` is cuda only when a CUDA device is visible *and* (under Ray) one was reserved:
    a GPU that Ray did not reserve may belong to another actor. ``cuda`` where no CUDA device
    is visible, where Ray reserved none, or ``cuda:N`` past the visible devices is a
    ConfigError.
    """
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    usable = visible > 0 and (reserved_gpus is None or reserved_gpus > 0)
    if name == "auto":
        return torch.device("cuda" if usable else "cpu")
    device = torch.device(name)
    if device.type != "cuda":
        return device
    if not visible:
        raise ConfigError(f"learner.device={name} but this learner sees no CUDA device; "
                          "use learner.device=auto or cpu")
    if not usable:
        raise ConfigError(f"learner.device={name} but Ray reserved no GPU for the learner; "
                          "use learner.device=auto or cpu")
    if (device.index or 0) >= visible:
        raise ConfigError(f"learner.device={name} but this learner sees {visible} CUDA "
                          f"device(s) (cuda:0 to cuda:{visible - 1}); use learner.device=cuda")
    return device


def use_full_float32() -> None:
    """Turn TensorFloat-32 off for CUDA matmuls and cuDNN (convolutions, RNNs): full float32.

    On Ampere and later GPUs TF32 rounds float32 inputs to 10 mantissa bits. PyTorch leaves it
    off for matmuls but on for cuDNN convolutions by default, so a CUDA learner's conv torso
    would compute with less precision than a CPU learner or the CPU runners. With both off a
    CUDA update equals the CPU update up to float32 summation order (``tests/test_gpu.py``),
    at some speed cost on those GPUs. Set in the learner's process at construction; it has no
    effect on CPU. The long-standing ``allow_tf32`` flags are used (valid in every PyTorch mira
    supports): mixing them with the newer ``fp32_precision`` settings makes reading cuDNN's flags
    (e.g. ``torch.backends.cudnn.flags()``) raise.
    """
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def flush_denormals(on: bool) -> None:
    """Flush denormal floats to zero (or not) in this process's CPU arithmetic.

    A float32 below about 1.2e-38 is denormal, and x86 CPUs compute with such values many
    times slower than with normal ones: gradients that decay there slowed a learner's backward
    about 3x (``learner.flush_denormal``). The flag is each thread's own, and a thread takes
    its creator's when it starts, so it is set before the learner's threads exist (before
    ``torch.set_num_threads`` and the first parallel operation); threads started earlier keep
    theirs. With flushing on, a denormal input or result counts as 0. A GPU computes with
    denormals at full speed, so this matters to CPU arithmetic only.
    """
    torch.set_flush_denormal(on)


def to_cpu(tree):
    """A copy of ``tree`` (nested dicts, lists, tuples) whose tensors are detached CPU copies.

    Every tensor that leaves the learner goes through here. It always copies, also on CPU:
    there ``.cpu()`` returns the tensor itself, so an in-process runner would hold the
    learner's live parameters and see update ``v + 1`` in weights stamped ``v``, and a held
    checkpoint would change under its holder. Other leaves (numbers, strings) are kept.
    """
    if isinstance(tree, torch.Tensor):
        return tree.detach().to("cpu", copy=True)
    if isinstance(tree, dict):
        return {k: to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_cpu(v) for v in tree)
    return tree
