#!/bin/bash
# How train_throughput.txt was made (2026-11-27, the 2-core CPU VM, nothing else running): each bench twice with
# the CLIs' malloc setting (albert_jax/cpu_allocator.py; the benches set it for both sides) and twice without
# (MALLOC_ARENA_MAX=8 is a malloc variable of the user's own, so the setting is left off), processes alternated.
cd "$(dirname "$0")/../../.."
P=${PYTHON:-python}
for round in 1 2; do
  for mode in reuse default; do
    env_prefix=""; [ $mode = default ] && env_prefix="MALLOC_ARENA_MAX=8"
    echo "=== round $round $mode sst2"; env $env_prefix $P bench/train_throughput.py --config=configs/wiki_books_cpu_hour.py --task=sst2 --steps=20 2>&1 | grep -v Warning | tail -12
    echo "=== round $round $mode tiny"; env $env_prefix $P bench/train_throughput.py --config=configs/tiny.py --steps=8 2>&1 | grep -v Warning | tail -12
    echo "=== round $round $mode recipe"; env $env_prefix $P bench/train_throughput.py --config=configs/wiki_books_cpu_hour.py --steps=8 2>&1 | grep -v Warning | tail -12
  done
done
echo "=== base reuse"; $P bench/train_throughput.py --steps=4 2>&1 | grep -v Warning | tail -12
echo "=== base default"; MALLOC_ARENA_MAX=8 $P bench/train_throughput.py --steps=4 2>&1 | grep -v Warning | tail -12
echo DONE
