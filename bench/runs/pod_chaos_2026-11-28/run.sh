#!/bin/bash
# The chaos test on the local pod, its babysit lines and the run's goodput table printed: two workers of two CPU
# devices, faults at seeded steps (a worker's training killed, worker 0 lost whole, a worker frozen), Cloud Storage
# failing 10% of requests. 2-core CPU VM, 2026-11-28, jax 0.10.2, nothing else running.
python -m pytest -q -s tests/test_pod_chaos.py > bench/runs/pod_chaos_2026-11-28/chaos.txt 2>&1
