"""``ray job submit`` as docs/ray.md documents it.

A head node whose ``~/.ray/auth_token`` exists (Ray 2.59+ writes one the first time a local
``ray.init()`` instance starts, and ``ray start --head`` then turns token authentication on), a job
submitted with ``RAY_AUTH_MODE=token``, ``mira train ... runtime.address=auto`` inside it. The head
runs in its own process group (``ray start --block``) and is stopped by signal: ``ray stop`` would
end every Ray process of the machine, a developer's running experiments included.
"""

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.ray, pytest.mark.slow]


_taken: set[int] = set()


def free_port() -> int:
    """A free port below the kernel's ephemeral range and above Ray's worker ports.

    A port the kernel hands out (``bind(0)``) lies in the ephemeral range, where the outgoing
    connections of the head's own processes may take it before the server meant for it binds
    (the likeliest cause of a CI run whose dashboard never came up). Ray's workers listen on
    10002-19999.
    """
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ephemeral.read_text().split()[0]) if ephemeral.exists() else 32768
    while True:
        port = random.randrange(20000, max(min(low, 32768), 20100))
        if port in _taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        _taken.add(port)
        return port


def wait_for(port: int, seconds: float, process: subprocess.Popen) -> bool:
    end = time.time() + seconds
    while time.time() < end and process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.5)
    return False


def test_ray_job_submit_runs_mira_train(tmp_path):
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(tmp_path / "home"), PATH=bin_dir + os.pathsep + env.get("PATH", ""))
    (tmp_path / "home").mkdir()
    ray_cli = os.path.join(bin_dir, "ray")
    subprocess.run([ray_cli, "get-auth-token", "--generate"], env=env, check=True,
                   capture_output=True, timeout=60)
    assert (tmp_path / "home" / ".ray" / "auth_token").is_file()
    gcs, dashboard = free_port(), free_port()
    head_log = open(tmp_path / "head.log", "w")  # a file: a pipe nobody reads can fill and block
    head = subprocess.Popen(
        [ray_cli, "start", "--head", f"--port={gcs}", f"--dashboard-port={dashboard}",
         # Every fixed default port moved: another Ray instance on the machine (a test's, a run's)
         # holds them, and a head whose dashboard agent cannot bind never accepts a job.
         *(f"--{name}={free_port()}"
           for name in ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                        "metrics-export-port", "runtime-env-agent-port",
                        "ray-client-server-port", "node-manager-port",
                        "object-manager-port")),
         "--num-cpus=3", "--include-dashboard=true", "--block"],
        env=env, stdout=head_log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert wait_for(dashboard, 180, head), (
            "the head node's dashboard did not come up; head output:\n"
            + (tmp_path / "head.log").read_text()[-3000:])
        overrides = ["runtime.address=auto", "runtime.num_runners=1", "run.total_frames=600",
                     "run.log_every_s=1", "runtime.envs_per_runner=4", "learner.unroll_length=5",
                     "learner.batch_size=4", f"run.dir={tmp_path / 'job_run'}"]
        submit = [ray_cli, "job", "submit", "--address", f"http://127.0.0.1:{dashboard}", "--",
                  "mira", "train", str(ROOT / "configs/impala_minigrid.yaml"), *overrides]
        deadline = time.time() + 120
        while True:  # the job agent comes up some seconds after the dashboard
            job = subprocess.run(submit, env={**env, "RAY_AUTH_MODE": "token"},
                                 capture_output=True, text=True, timeout=240)
            if "No available agent" not in job.stdout + job.stderr or time.time() > deadline:
                break
            time.sleep(3)
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        assert "[mira] done:" in job.stdout + job.stderr
        assert (tmp_path / "job_run" / "summary.json").is_file()
    finally:
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        head_log.close()
        # `ray stop` would remove the head's address file; a head stopped by signal leaves it,
        # and a later ray.init() with no address would try to join the dead cluster.
        current = Path("/tmp/ray/ray_current_cluster")
        if current.is_file() and current.read_text().strip().endswith(f":{gcs}"):
            current.unlink()
