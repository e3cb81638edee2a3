#!/usr/bin/env bash
# Ensembles (the paper's Section 4.11) against their best member on two tasks (2-core CPU VM, jax 0.10.2,
# 2026-11-29): eight seeds of the built-in task and six of SST-2 fine-tuned, the best 2, 4 (chosen beforehand) and
# all by dev score combined.
#  - builtin: the word-order task from the quickstart's tiny pretraining run;
#  - SST-2 (the sample's train and dev files): from the 4-layer real-English run of Table 10's miniature
#    (bench/runs/paper_tables_2026-11-29/run.sh), the CPU-hour recipe's fine-tuning at 1,000 steps.
# Each ensemble's output is kept here as TASK-topK.txt, with the members' and the ensembles' result.json.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runs=/tmp/albert_ensembles
python -m albert_jax.train --config=configs/tiny.py --workdir=$runs/tiny
for seed in 0 1 2 3 4 5 6 7; do
  python -m albert_jax.finetune --config=configs/finetune/builtin.py --config.init=$runs/tiny \
      --config.train.seed=$seed --workdir=$runs/builtin/seed$seed
done
for seed in 0 1 2 3 4 5; do
  python -m albert_jax.finetune --config=configs/finetune/wiki_books_cpu_hour.py:sst2 \
      --config.init=/tmp/albert_sweeps/table10_depth/num_layers=4 --config.train.num_steps=1000 \
      --config.train.seed=$seed --workdir=$runs/sst2/seed$seed
done
for task in builtin sst2; do
  all=$(ls -d "$runs/$task"/seed* | wc -l)
  for k in 2 4 "$all"; do  # 4 chosen beforehand; 2 and every member beside it
    python -m albert_jax.ensemble --members="$runs/$task/seed*" --top_k="$k" --workdir="$runs/$task/ensemble-top$k" \
        | tee "$here/$task-top$k.txt"
  done
  mkdir -p "$here/$task"
  for dir in "$runs/$task"/*/; do cp "$dir/result.json" "$here/$task/$(basename "$dir").json"; done
done
