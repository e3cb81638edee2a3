#!/usr/bin/env bash
# 2-core CPU VM (AMD EPYC), jax 0.10.2, 2026-11-29; nothing else running after the first repeat.
# table.md: the medians over the 3 repeats of report.json (bench/slice_moves.py's table()).
python bench/slice_moves.py --repeats=3 --out=/tmp/slice_moves
# local_pod.txt: the local pod's move (v3-16 -> v3-8 -> v3-16), from
python -m pytest -s tests/test_pod_chaos.py -k moves
