#!/bin/bash
# BLiMP's 51,000 pairs: random weights of the recipe's shape as soon as its first checkpoint exists (the shape is
# all it needs; seed 0), then the checkpoint of step 3,000 paired against them.
cd /work/main
out=/work/runs/albert_wiki_books
until [ -e $out/run/checkpoints/500/commit_success.txt ] || ls $out/run/checkpoints/500 >/dev/null 2>&1; do sleep 20; done
sleep 30
s=$(date +%s)
python -m albert_jax.blimp --checkpoint=$out/run --data=../shared/data/blimp --step=500 --random_init \
    --vocab=$out/vocab-30k.model --output=$out/blimp_random.json > $out/blimp_random.log 2>&1
echo "BLiMP, random weights: $(( $(date +%s) - s )) s" >> $out/times.txt
until grep -q "^pretraining" $out/times.txt; do sleep 20; done
s=$(date +%s)
python -m albert_jax.blimp --checkpoint=$out/run --data=../shared/data/blimp --step=3000 \
    --baseline=$out/blimp_random.json --output=$out/blimp_3000.json > $out/blimp_3000.log 2>&1
echo "BLiMP, step 3000: $(( $(date +%s) - s )) s" >> $out/times.txt
