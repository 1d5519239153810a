import pytest

from scripts.bench.env import main


def test_bench_env_prints_both_backends_and_their_ratio(capsys):
    main(["Pong", "--envs", "2", "--seconds", "0.2"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[bench_env] gymnasium  Pong x 2:")
    assert out[1].startswith("[bench_env] ale_vector Pong x 2:") and "x gymnasium)" in out[1]
    rates = [float(line.split(":")[1].split()[0]) for line in out]
    assert all(r > 0 for r in rates)


def test_bench_env_lab_prints_each_view_and_drawing_path_and_its_ratio(capsys):
    main(["--suite", "lab6", "--envs", "6", "--seconds", "0.2"])
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" lab6 x 6:")[0] for line in out] == [
        "[bench_env] minigrid view and drawing  ", "[bench_env] minigrid view, mira drawing",
        "[bench_env] mira view and drawing      "]
    assert out[0].endswith("(1.00x minigrid)") and all("x minigrid)" in line for line in out)
    assert all(float(line.split(":")[1].split()[0]) > 0 for line in out)


def test_bench_learner_prints_each_precision_and_thread_count(capsys):
    from scripts.bench.learner import main as bench_learner

    assert bench_learner(["configs/impala_minigrid.yaml", "runtime.envs_per_runner=4",
                          "learner.unroll_length=5", "learner.batch_size=4",
                          "--seconds", "0.05", "--threads", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "20 steps per update" in out[0]
    rows = [line for line in out[1:] if "thread(s)" in line]
    assert [r.split()[1] for r in rows] == ["float32", "bfloat16"]
    assert all(float(r.split(":")[1].split()[0]) > 0 and "page faults/update" in r for r in rows)


@pytest.mark.slow
def test_bench_learner_checks_the_compiled_update_against_eager(capsys):
    """``--check-compile``: the compiled update's changes within float32 rounding of eager's."""
    from scripts.bench.learner import main as bench_learner

    assert bench_learner(["configs/impala_minigrid.yaml", "runtime.envs_per_runner=4",
                          "learner.unroll_length=5", "learner.batch_size=4",
                          "agent.core_options.hidden_size=32", "--check-compile"]) == 0
    first, second = capsys.readouterr().out.splitlines()[-2:]
    assert "2 updates of one batch of 20 steps on cpu" in first
    assert float(first.split("within ")[1].split()[0]) < 1e-3
    pairs = [part.rsplit(" ", 3) for part in second.split(": ", 1)[1].split(", ")]
    assert [p[0] for p in pairs] == ["policy_loss", "value_loss", "entropy", "grad_norm"]
    for _, eager, _, compiled in pairs:
        assert float(compiled) == pytest.approx(float(eager), rel=1e-3, abs=1e-6)


def test_freed_memory_is_reused_without_new_page_faults():
    """learners/update/malloc.py: a large block freed comes back already mapped for the next one.

    Without the settings glibc maps a block this size (64 MB, above its largest mmap
    threshold) afresh on every allocation: 16,384 page faults each time. The next block is a
    little smaller: torch asks for 64-byte aligned memory, which glibc serves from a free
    chunk only with room for the alignment, so a block of exactly the freed size may come
    from fresh heap instead when the chunks around the freed one are still in use (which
    depends on what else the process allocated). The learner's update, whose blocks vary,
    measures about 10 page faults per update (``python -m scripts.bench.learner``).
    """
    import resource

    import pytest
    import torch

    from learners.update.malloc import keep_freed_memory

    if not keep_freed_memory():
        pytest.skip("the C library is not glibc")

    def faults_of_one_block(floats: int) -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = torch.ones(floats)  # written all through
        del block
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults_of_one_block(16 * 2**20)  # 64 MB: new pages, unless the heap already held them
    assert faults_of_one_block(15 * 2**20) < 1000
