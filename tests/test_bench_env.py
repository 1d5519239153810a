from scripts.bench_env import main


def test_bench_env_prints_both_backends_and_their_ratio(capsys):
    main(["Pong", "--envs", "2", "--seconds", "0.2"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[bench_env] gymnasium  Pong x 2:")
    assert out[1].startswith("[bench_env] ale_vector Pong x 2:") and "x gymnasium)" in out[1]
    rates = [float(line.split(":")[1].split()[0]) for line in out]
    assert all(r > 0 for r in rates)
