#!/usr/bin/env bash
# A profile of the tiny config's training step (2-core CPU VM, jax 0.10.2, 2026-11-29): steps 20-22 traced, then
# drawn into docs/profile_tiny.png; the overhead bench's record kept here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rm -rf /tmp/albert_profiled
python -m albert_jax.train --config=configs/tiny.py --workdir=/tmp/albert_profiled --config.train.num_steps=40 --config.train.warmup_steps=4 \
    --config.train.profile_steps=3 --config.train.profile_from=20 | tee "$here/train.txt"
python "$here/draw.py" /tmp/albert_profiled/profiles/plugins/profile/*/*.trace.json.gz docs/profile_tiny.png
python bench/profiling_overhead.py --repeats=3 --out=/tmp/profiling_overhead | tee "$here/profiling_overhead.txt"
