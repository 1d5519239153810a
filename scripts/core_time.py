"""Where a machine's core time goes, by process: ``mira bench``'s accounting of a run.

Read from Linux's ``/proc/<pid>/stat`` (user + system time of every thread of a process)
and ``/proc/<pid>/cmdline``, which Ray's workers retitle ``ray::Learner.update``,
``ray::EnvRunner.rollout_with_info`` and so on. Two snapshots around a window give each
group's core-seconds in it: the learner actor, the runner actors, evaluator actors, this
process (the driver, and with ``runtime.num_runners: 0`` the in-process learner and runner
too), Ray's own processes (raylet, GCS, dashboard and agents, log monitor, idle workers), and
everything else on the machine, which on an idle machine should be near zero. Where there is no
``/proc`` (macOS, Windows) the snapshot is empty and the accounting is skipped.
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
