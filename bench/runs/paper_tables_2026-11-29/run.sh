#!/usr/bin/env bash
# The paper's Tables 10, 7, 8 and 12 in miniature on the real-English sample (2-core CPU VM, jax 0.10.2, 2026-11-29):
# the vocabulary of configs/wiki_books_cpu_hour.py first (where it is not made yet), then each table's sweep (a
# sweep run again resumes where it stopped), then its record kept here (each run's config, result, goodput record,
# logs and TensorBoard files; not its checkpoints).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
test -f /tmp/albert_wiki_books/vocab-30k.model || python -m albert_jax.data.vocab \
  --input='wikiextractor:../shared/data/corpora/wikipedia/*/wiki_*@7,gutenberg:../shared/data/corpora/books/*.txt@3' \
  --vocab_size=30000 --output=/tmp/albert_wiki_books/vocab-30k
for table in table10_depth table7_layers table8_width table12_dropout; do
  python -m launch.sweep --sweep=configs/sweeps/$table.py --miniature --workdir=/tmp/albert_sweeps/$table
  cp -r /tmp/albert_sweeps/$table "$here/" && find "$here/$table" -name checkpoints -type d -prune -exec rm -rf {} +
done
