#!/usr/bin/env bash
# 2-core CPU VM, nothing else running, 2026-11-27; /tmp/albert_before: git worktree add /tmp/albert_before 772ad24
# (the code before corpus_index.py). 19 minutes.
python bench/corpus_scale.py --dir=/tmp/corpus_scale --copies=1,4,40 --hosts=1,8,64,128 --jsonl_documents=10000000 \
    --gcs=1,4 --before=/tmp/albert_before
