#!/bin/bash
# A survivor's exit after a lost host, and a hang's end, at the defaults (60 s heartbeat timeout; the watchdog's
# adaptive limit and train.stall_seconds=30). 2-core CPU VM, 2026-11-28, jax 0.10.2, nothing else running.
python bench/failure_bounds.py --out=/tmp/failure_bounds | tee bench/runs/failure_bounds_2026-11-28/failure_bounds.txt
cp /tmp/failure_bounds/report.json bench/runs/failure_bounds_2026-11-28/
