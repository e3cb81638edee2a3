#!/bin/bash
# The continued-pretraining demonstration of bench/runs/continued_2026-11-28 again, at a fifth of the recipe's
# learning rate (LAMB 2e-3 rather than 1e-2) for both arms; the same checkpoint, corpus, batches and held-out
# documents. BLiMP "before" is the same checkpoint's, copied from that run rather than scored again.
# 2-core CPU VM, 2026-11-28 (a test ran beside the first 100 steps of the continued arm).
set -e
mkdir -p /tmp/albert_continued_lr2e-3
cp /tmp/albert_continued/blimp-before.json /tmp/albert_continued_lr2e-3/
python bench/continued_pretraining.py --init=/tmp/albert_wiki_books/run --workdir=/tmp/albert_continued_lr2e-3 \
    --blimp=../shared/data/blimp --blimp_pairs=100 -- --config.train.learning_rate=2e-3 \
    | tee bench/runs/continued_lr2e-3_2026-11-28/continued_pretraining.txt
cp /tmp/albert_continued_lr2e-3/report.json bench/runs/continued_lr2e-3_2026-11-28/
