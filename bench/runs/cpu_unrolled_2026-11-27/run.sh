#!/bin/bash
# How this folder was made (2026-11-27, the 2-core CPU VM, nothing else running), after model.scan_unroll's
# platform default became "every block" on a CPU (the loop kept on a TPU only): what unrolling costs in compile
# time and buys in the gradient's time at depth, then the two benches whose default program changed (the tiny
# training step and the SST-2 fine-tuning step; the recipe's and ALBERT-base's were unrolled already), twice each.
cd "$(dirname "$0")/../../.."
P=${PYTHON:-python}
here=bench/runs/cpu_unrolled_2026-11-27
{
  $P bench/compile_depth.py --layers=12,24 --unroll=1,all --time_steps=5
  $P bench/compile_depth.py --config=configs/tiny.py --layers=4 --batch=64 --seq_len=64 --unroll=1,all,1,all --time_steps=30
  $P bench/compile_depth.py --config=configs/wiki_books_cpu_hour.py --layers=4 --batch=32 --seq_len=64 --unroll=1,all,1,all --time_steps=20
} 2>&1 | grep -v Warning > $here/compile_depth.txt
for round in 1 2; do
  echo "=== round $round sst2"; $P bench/train_throughput.py --config=configs/wiki_books_cpu_hour.py --task=sst2 --steps=20 2>&1 | grep -v Warning | tail -6
  echo "=== round $round tiny"; $P bench/train_throughput.py --config=configs/tiny.py --steps=8 2>&1 | grep -v Warning | tail -8
done > $here/train_throughput.txt

# Activation recomputation with the loop unrolled (why the platform default keeps the loop when remat is on).
for remat in none full; do
  $P bench/compile_depth.py --layers=12 --unroll=1,all --remat=$remat 2>&1 | grep -v Warning
done > $here/remat.txt
echo DONE
