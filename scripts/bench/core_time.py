"""Where a machine's core time goes, by process: ``mira bench``'s accounting of a run.

Read from Linux's ``/proc/<pid>/stat`` (user + system time of every thread of a process)
and ``/proc/<pid>/cmdline``, which Ray's workers retitle ``ray::Learner.update``,
``ray::EnvRunner.rollout_with_info`` and so on. Two snapshots around a window give each
group's core-seconds in it: the learner actor, the runner actors, evaluator actors, this
process (the driver, and with ``runtime.num_runners: 0`` the in-process learner and runner
too), Ray's own processes (raylet, GCS, dashboard and agents, log monitor, idle workers), and
everything else on the machine, which on an idle machine should be near zero. Where there is no
``/proc`` (macOS, Windows) the snapshot is empty and the accounting is skipped.

Against the compute-bound limit ``mira bench`` prints (``scripts/bench/command.py``), the groups'
core time per step beyond the limit's (a) + (b) + (c) splits into parts (``limit_gap``), and
the parts measured alone set a ceiling no layout of them passes (``parts_ceiling``).
"""

from __future__ import annotations

import os

GROUPS = ("learner", "runners", "evaluators", "this process", "Ray's own processes",
          "other processes")


def group_of(cmdline: str, pid: int, own_pid: int) -> str:
    """The accounting group of a process from its command line (arguments joined by spaces)."""
    if pid == own_pid:
        return "this process"
    program = cmdline.split(" ", 1)[0]
    if program.startswith("ray::Learner"):
        return "learner"
    if program.startswith("ray::EnvRunner"):
        return "runners"
    if program.startswith("ray::Evaluator"):
        return "evaluators"
    if program.startswith("ray::") or "/ray/" in cmdline.split(" --", 1)[0]:
        return "Ray's own processes"
    return "other processes"


def snapshot() -> dict[int, tuple[str, float]]:
    """Every process's command line and CPU seconds so far (its threads included).

    Empty where ``/proc`` does not exist or cannot be read (a diagnostic never stops a bench).
    Processes that end while being read are skipped.
    """
    try:
        return _read_proc()
    except (OSError, ValueError, IndexError):
        return {}


def _read_proc() -> dict[int, tuple[str, float]]:
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        # fields after the command in parentheses: state is field 3, utime 14, stime 15
        fields = stat[stat.rfind(b")") + 2:].split()
        name = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
        if not name:  # a kernel thread: its name in parentheses
            name = stat[stat.find(b"(") + 1 : stat.rfind(b")")].decode(errors="replace")
        out[int(entry.name)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def by_group(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
             own_pid: int | None = None) -> dict[str, float]:
    """Core-seconds each group used between two snapshots, in ``GROUPS`` order.

    A process that started in between counts from 0; one that ended in between is missing
    from ``after`` and its last part is not counted. A pid reused by a new process (a shorter
    time than before) counts from 0 too.
    """
    own_pid = os.getpid() if own_pid is None else own_pid
    used = dict.fromkeys(GROUPS, 0.0)
    for pid, (name, seconds) in after.items():
        start = before.get(pid, (name, 0.0))[1]
        used[group_of(name, pid, own_pid)] += seconds - start if seconds >= start else seconds
    return used


def limit_gap(limit_ms: dict[str, float], used_ms: dict[str, float]) -> dict[str, float]:
    """Core-ms per step a run spends beyond the limit's (a) + (b) + (c), part by part.

    ``limit_ms``: core-ms per step of ``env`` (a), ``inference`` (b), ``learner`` (c), the
    ``learner_threads`` cost (c on the run's threads, bench's ``learner_cost``) and
    ``rollout`` (a runner's unroll in bench's process, per step); ``used_ms``: the run's
    core-ms per step by process group (``GROUPS``). The parts sum to the run's core-ms per step
    less the limit's: the learner's threads (alone), the learner in the run beyond that (Ray's
    threads, hand-offs, the other processes' caches), the runner's own loop (buffers,
    sampling, frame stacking beyond (a) + (b), alone), the runners in the run beyond that
    (weights loaded, unrolls handed over), and every other group as it is.
    """
    parts = {
        "the learner's threads": limit_ms["learner_threads"] - limit_ms["learner"],
        "the learner in the run": used_ms["learner"] - limit_ms["learner_threads"],
        "the runner's own loop": limit_ms["rollout"] - limit_ms["env"] - limit_ms["inference"],
        "the runners in the run": used_ms["runners"] - limit_ms["rollout"],
    }
    parts.update((k, v) for k, v in used_ms.items() if k not in ("learner", "runners"))
    return parts


def parts_ceiling(limit_sum: float, gap: dict[str, float]) -> float:
    """The largest share of the limit a run whose learner works on its threads can reach.

    ``limit_sum``: the limit's (a) + (b) + (c) in core-ms per step; ``gap``: ``limit_gap``'s
    parts. The limit counts the learner at its one-thread cost and a runner at (a) + (b);
    measured alone, the learner on the run's threads and the runner's whole unroll cost more
    (the first two measured parts). With the cores always busy and nothing else taking core
    time (no hand-offs, no Ray, no interference), end to end is the limit times
    ``limit_sum / (limit_sum + those two)``: the share no layout passes that runs the learner
    on those threads and the runners' unrolls as measured.
    """
    alone = sum(max(gap[k], 0.0) for k in ("the learner's threads", "the runner's own loop"))
    return limit_sum / (limit_sum + alone)


def print_core_time(cycle: dict, cores: int, limit_ms: float) -> None:
    """Print (d)'s core time per step by process group against the cores the window had.

    ``limit_ms``: the core-ms one step costs in the limit's sum, (a) + (b) + (c); the
    groups' sum beyond it is the extra core time a run spends, and the cores' idle share
    the time no process used.
    """
    steps, window = cycle["window_steps"], cycle["window_s"]
    used = cycle["core_s"]
    parts = ", ".join(f"{name} {1e3 * s / steps:.3f}" for name, s in used.items())
    total = sum(used.values())
    print(f"[bench]     core-ms per step by process: {parts}; in all {1e3 * total / steps:.3f} "
          f"against the limit's {limit_ms:.3f} (a + b + c); the {cores} cores "
          f"{100 * total / (cores * window):.0f}% busy", flush=True)


def print_gap(cycle: dict, cores: int, limit_ms: dict[str, float],
              threads: int) -> tuple[dict, float]:
    """Print (d)'s core time beyond the limit part by part, and the parts' ceiling; returns both.

    The parts are ``limit_gap``'s, the ceiling ``parts_ceiling``'s.

    Also the share of the limit it implies: end to end is the cores' busy share times the
    limit's core-ms per step over the run's, so a gap is idle cores or extra core time.
    """
    steps, window = cycle["window_steps"], cycle["window_s"]
    used = {k: 1e3 * s / steps for k, s in cycle["core_s"].items()}
    gap = limit_gap(limit_ms, used)
    total = sum(used.values())
    limit_sum = limit_ms["env"] + limit_ms["inference"] + limit_ms["learner"]
    busy = total * steps / 1e3 / (cores * window)  # core-seconds used over those held
    names = {"the learner's threads": f"the learner's {threads} thread{'s' * (threads > 1)} "
             "(alone)", "the runner's own loop": "the runner's own loop (alone)"}
    parts = ", ".join(f"{names.get(k, k)} {v:+.3f}" for k, v in gap.items())
    print(f"[bench]     beyond the limit, core-ms per step: {parts}; so end to end = "
          f"{100 * busy:.0f}% busy x {limit_sum:.3f} / {total:.3f} = "
          f"{100 * busy * limit_sum / total:.0f}% of the limit", flush=True)
    ceiling = parts_ceiling(limit_sum, gap)
    print(f"[bench]     measured alone, the learner on {threads} thread{'s' * (threads > 1)} and "
          f"the runner's own loop cap a run of these parts at {100 * ceiling:.0f}% of the limit "
          "(no hand-offs, no Ray, the cores always busy)", flush=True)
    return gap, ceiling
