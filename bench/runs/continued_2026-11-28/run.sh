#!/bin/bash
# Continued pretraining against from scratch, on the built-in corpus (Python's documentation), from the one-hour
# recipe's checkpoint (Wikipedia and books). 2-core CPU VM, 2026-11-28, nothing else running.
set -e
python -m albert_jax.data.vocab --input='wikiextractor:../shared/data/corpora/wikipedia/*/wiki_*@7,gutenberg:../shared/data/corpora/books/*.txt@3' \
    --vocab_size=30000 --output=/tmp/albert_wiki_books/vocab-30k
python -m albert_jax.train --config=configs/wiki_books_cpu_hour.py --workdir=/tmp/albert_wiki_books/run
python bench/continued_pretraining.py --init=/tmp/albert_wiki_books/run --workdir=/tmp/albert_continued \
    --blimp=../shared/data/blimp --blimp_pairs=100 --plot=docs/continued_pretraining.png \
    | tee bench/runs/continued_2026-11-28/continued_pretraining.txt
cp /tmp/albert_continued/report.json bench/runs/continued_2026-11-28/
