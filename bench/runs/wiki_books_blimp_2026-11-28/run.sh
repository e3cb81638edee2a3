#!/bin/bash
# The real-English recipe, kept outside /tmp so that a later session can score its step-3,000 checkpoint on all of
# BLiMP (docs/what_pretraining_buys.md's commands). Started 2026-11-28 on the 2-core CPU VM.
set -e
cd /work/main
out=/work/runs/albert_wiki_books
s=$(date +%s)
python -m albert_jax.data.vocab --input='wikiextractor:../shared/data/corpora/wikipedia/*/wiki_*@7,gutenberg:../shared/data/corpora/books/*.txt@3' \
    --vocab_size=30000 --output=$out/vocab-30k > $out/vocab.log 2>&1
echo "vocabulary: $(( $(date +%s) - s )) s" >> $out/times.txt
s=$(date +%s)
python -m albert_jax.train --config=configs/wiki_books_cpu_hour.py --workdir=$out/run --config.data.vocab=$out/vocab-30k.model > $out/train.log 2>&1
echo "pretraining: $(( $(date +%s) - s )) s" >> $out/times.txt
