#!/usr/bin/env bash
# Gather what a bare GPU machine without a package index needs to run mira and its tests.
#
# The GPU image has PyTorch (Python 3.12), numpy, opencv, scipy, matplotlib, pyyaml,
# tensorboard, msgpack, protobuf, grpcio and pytest, but not Ray, gymnasium, ale-py or
# minigrid. This script, run in the repository root on a machine with pip and a network,
# fills the git-ignored folder .whl/ (about 37 MB) with:
#   - cp312 manylinux wheels of gymnasium, ale-py, minigrid (+ pygame, which minigrid
#     imports), farama-notifications and Ray's missing needs (jsonschema & co.), at the
#     versions installed here, so the GPU machine runs what CI tests;
#   - ray.tar.xz: Ray's wheel unpacked without what mira never loads (Java jars, the
#     dashboard's web client, RLlib, Serve, Tune, Train, Data, LLM) and xz-compressed:
#     20 MB instead of the 79 MB wheel, which is over a 64 MB transfer;
#   - setup.sh: sourced on the GPU machine, it installs all of it into /tmp/site and
#     defines `mira` (python3 -m scripts.cli).
# On the GPU machine, from the repository root:
#   . .whl/setup.sh && python3 -m pytest -q && mira bench configs/impala_atari_paper.yaml env.game=Pong runtime.num_runners=15
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
version() { { python3 -m pip show "$1" 2>/dev/null || true; } | awk '/^Version:/{print $2}'; }
platforms=""
for p in manylinux_2_17 manylinux2014 manylinux1 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 manylinux_2_34 manylinux_2_35; do
  platforms="$platforms --platform ${p}_x86_64"
done
pins=""
for name in gymnasium ale-py minigrid pygame farama-notifications jsonschema jsonschema-specifications referencing rpds-py; do
  v=$(version "$name"); pins="$pins $name${v:+==$v}"
done
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms -d .whl $pins
ray_version=$(version ray)
tmp=$(mktemp -d)
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms -d "$tmp" "ray==${ray_version}"
(cd "$tmp" && unzip -q ray-*.whl && rm ray-*.whl \
  && rm -rf ray/jars ray/dashboard/client/build ray/rllib ray/serve ray/llm ray/data ray/train ray/tune \
  && tar cf - ray ray-*.dist-info | xz -T0 -9 > ray.tar.xz)
mv "$tmp/ray.tar.xz" .whl/ && rm -rf "$tmp"
cat > .whl/setup.sh <<'EOF'
# Sourced on the GPU machine from the repository root (written by scripts/device/gpu_wheels.sh).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
tar xJf .whl/ray.tar.xz -C /tmp/site || return 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mira() { python3 -m scripts.cli "$@"; }
EOF
du -sh .whl
