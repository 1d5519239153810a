import os
import subprocess
import sys
import time

import pytest

from scripts.bench.core_time import GROUPS, by_group, group_of, snapshot

linux = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux's /proc")


@pytest.mark.parametrize("cmdline, group", [
    ("ray::Learner.update", "learner"),
    ("ray::Learner", "learner"),
    ("ray::EnvRunner.rollout_with_info", "runners"),
    ("ray::Evaluator.evaluate", "evaluators"),
    ("ray::IDLE", "Ray's own processes"),
    ("ray::DashboardAgent", "Ray's own processes"),
    ("/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --node=1",
     "Ray's own processes"),
    ("/venv/bin/python3 /venv/lib/python3.11/site-packages/ray/_private/log_monitor.py --x=1",
     "Ray's own processes"),
    ("/usr/bin/python3 -m pytest --basetemp=/tmp/ray/x", "other processes"),
    ("kworker/0:1", "other processes"),
])
def test_group_of_names_ray_workers_by_their_titles(cmdline, group):
    assert group_of(cmdline, pid=10, own_pid=1) == group


def test_this_process_is_its_own_group_whatever_its_title():
    assert group_of("ray::EnvRunner", pid=7, own_pid=7) == "this process"


def test_by_group_counts_new_processes_from_zero_and_reused_pids_afresh():
    before = {1: ("ray::Learner", 5.0), 2: ("ray::EnvRunner", 3.0), 3: ("raylet", 9.0)}
    after = {1: ("ray::Learner.update", 6.5), 2: ("ray::EnvRunner", 3.25),
             3: ("bash", 0.5),  # pid 3 reused: its time restarted
             4: ("ray::EnvRunner", 0.25), 5: ("me", 1.0)}
    used = by_group(before, after, own_pid=5)
    assert list(used) == list(GROUPS)
    assert used == {"learner": 1.5, "runners": 0.5, "evaluators": 0.0, "this process": 1.0,
                    "Ray's own processes": 0.0, "other processes": 0.5}


@linux
def test_snapshot_charges_a_busy_child_its_core_time():
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.5: pass\n"
                              "input()"], stdin=subprocess.PIPE)
    try:
        start, before = time.monotonic(), snapshot()
        assert os.getpid() in before and before[os.getpid()][0]
        while child.pid not in (now := snapshot()) or now[child.pid][1] < 0.5:
            assert child.poll() is None and time.monotonic() - start < 60, "no 0.5 s seen"
        elapsed = time.monotonic() - start
        # the child's own time: its 0.5 s of spinning, most of it inside the window, and no
        # more than the window's wall time plus its start-up before the first snapshot
        grew = now[child.pid][1] - before.get(child.pid, ("", 0.0))[1]
        assert 0.3 <= grew <= elapsed + 0.5, (grew, elapsed)
        assert now[child.pid][0].startswith(sys.executable)
        assert by_group(before, now)["other processes"] >= grew - 0.02  # ticks of 10 ms
    finally:
        child.communicate(b"\n", timeout=10)


def test_limit_gap_splits_the_core_time_beyond_the_limit_into_parts_that_sum_to_it():
    from scripts.bench.core_time import limit_gap

    limit = {"env": 0.27, "inference": 0.13, "learner": 0.74, "learner_threads": 0.89,
             "rollout": 0.48}
    used = dict.fromkeys(GROUPS, 0.0)
    used.update({"learner": 0.92, "runners": 0.53, "Ray's own processes": 0.03,
                 "this process": 0.01})
    gap = limit_gap(limit, used)
    assert gap["the learner's threads"] == pytest.approx(0.15)
    assert gap["the learner in the run"] == pytest.approx(0.03)
    assert gap["the runner's own loop"] == pytest.approx(0.08)
    assert gap["the runners in the run"] == pytest.approx(0.05)
    assert gap["Ray's own processes"] == 0.03 and "learner" not in gap
    limit_sum = limit["env"] + limit["inference"] + limit["learner"]
    assert sum(gap.values()) == pytest.approx(sum(used.values()) - limit_sum)


def test_parts_ceiling_counts_only_the_costs_measured_alone():
    from scripts.bench.core_time import parts_ceiling

    gap = {"the learner's threads": 0.15, "the learner in the run": 0.03,
           "the runner's own loop": 0.08, "the runners in the run": 0.05,
           "Ray's own processes": 0.03}
    # 1.14 core-ms a step at the limit; the two parts alone add 0.23
    assert parts_ceiling(1.14, gap) == pytest.approx(1.14 / 1.37)
    # a part that came out negative (timing noise) does not raise the ceiling above 1
    assert parts_ceiling(1.0, {**gap, "the learner's threads": -0.02,
                               "the runner's own loop": 0.0}) == 1.0
