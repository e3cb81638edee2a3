"""What moving a run to a slice of another size costs: measured on this machine, processes as hosts (`--distributed`
over 127.0.0.1, two CPU devices each, configs/tiny.py shrunk, 8 data shards).

  python bench/slice_moves.py [--repeats=2] [--out=DIR]

A run begins on 2 hosts and checkpoints at steps 20 and 40. Then, from its checkpoint of step 40, the same command
continues it to step 60 on 2 hosts (a plain restart: the peer), on 1 host and on 4 hosts (moves), the three
alternated, each repeated. For each start, from its goodput record: the start-up (Python, JAX, the sources, the
held-out sets, the restore), the compilation, the wait for input (the first batch: one chunk per data shard the
host serves) and the steps/s of its 20 steps; and the largest relative difference of its losses from the unbroken
run's. A move's start is reported as a ratio to the restart's on the same run.
"""
import argparse
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / 'bench'))
from shared import tensorboard_scalars  # noqa: E402

RUN = ['--config=configs/tiny.py', '--config.train.num_steps=60', '--config.train.warmup_steps=5',
       '--config.train.log_every=1', '--config.train.eval_every=100000', '--config.train.eval_batches=1',
       '--config.train.checkpoint_every=20', '--config.train.keep_checkpoints=5', '--config.data.max_seq_length=64',
       '--config.model.max_position_embeddings=64', '--config.train.batch_size=16', '--config.train.fill_mask_text=',
       '--config.train.fill_mask_word=']


def train(workdir: pathlib.Path, hosts: int, *extra: str) -> float:
  """`hosts` processes as a pod's hosts training in `workdir`; the wall seconds until all ended."""
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  env = {'PYTHONPATH': str(REPO), 'XLA_FLAGS': '--xla_force_host_platform_device_count=2'}
  started = time.monotonic()
  processes = [subprocess.Popen([sys.executable, '-m', 'albert_jax.train', *RUN, *extra, f'--workdir={workdir}',
                                 '--distributed', f'--coordinator_address=127.0.0.1:{port}', f'--num_processes={hosts}',
                                 f'--process_id={i}'], cwd=REPO, env={**os.environ, **env},
                                stdout=open(workdir.parent / f'{workdir.name}-{i}.out', 'w'), stderr=subprocess.STDOUT)
               for i in range(hosts)]
  for process in processes:
    if process.wait(timeout=900):
      raise SystemExit(f'slice_moves: a run failed; see {workdir.parent}/{workdir.name}-*.out')
  return time.monotonic() - started


def losses(workdir: pathlib.Path) -> dict:
  return {step: value for _, step, value in tensorboard_scalars(workdir)[1]['loss']}


def table(rows: list) -> str:
  """The medians of the repeats per host count (one repeat slowed by other work on the machine moves no median)."""
  def median(hosts, key):
    values = sorted(r[key] for r in rows if r['hosts'] == hosts)
    return (values[(len(values) - 1) // 2] + values[len(values) // 2]) / 2
  repeats = sum(r['hosts'] == 2 for r in rows)
  lines = [f'from step 40 of a 2-host run on 8 data shards, to step 60 (medians of {repeats} repeats, alternated):',
           '| hosts | start-up s | compile s | input s | start s (sum) | vs a restart on 2 hosts | steps/s | '
           'largest loss difference |', '|---|---|---|---|---|---|---|---|']
  for hosts in (2, 1, 4):
    lines.append(f'| {hosts} | {median(hosts, "startup_s"):.1f} | {median(hosts, "compile_s"):.1f} | '
                 f'{median(hosts, "input_s"):.2f} | {median(hosts, "start_s"):.1f} | '
                 f'{median(hosts, "start_s") / median(2, "start_s"):.2f}x | {median(hosts, "steps_per_s"):.2f} | '
                 f'{max(r["max_loss_rel_diff"] for r in rows if r["hosts"] == hosts):.1e} |')
  return '\n'.join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--repeats', type=int, default=2)
  parser.add_argument('--out', default=None)
  args = parser.parse_args()
  out = pathlib.Path(args.out or tempfile.mkdtemp(prefix='slice_moves_'))
  out.mkdir(parents=True, exist_ok=True)
  base = out / 'unbroken'
  shutil.rmtree(base, ignore_errors=True)
  train(base, 2, '--config.data.shards=8')
  expected = losses(base)
  rows = []
  for repeat in range(args.repeats):
    for hosts in (2, 1, 4) if repeat % 2 == 0 else (4, 1, 2):
      workdir = out / f'from40-on{hosts}-{repeat}'
      shutil.rmtree(workdir, ignore_errors=True)
      shutil.copytree(base, workdir)
      shutil.rmtree(workdir / 'checkpoints' / '60')
      shutil.rmtree(workdir / 'tensorboard')
      (workdir / 'result.json').unlink()
      wall = train(workdir, hosts)  # the same command: the data shards come from the workdir
      attempt = json.loads((workdir / 'goodput.json').read_text())['attempts'][-1]
      seconds = attempt['seconds']
      got = losses(workdir)
      rows.append({'hosts': hosts, 'repeat': repeat, 'slice': attempt['slice'], 'first_step': attempt['first_step'],
                   'startup_s': seconds['startup'], 'compile_s': seconds['compile'], 'input_s': seconds['input'],
                   'steps_per_s': (attempt['last_step'] - attempt['first_step']) / seconds['steps'],
                   'wall_s': wall, 'start_s': seconds['startup'] + seconds['compile'] + seconds['input'],
                   'max_loss_rel_diff': max(abs(got[s] - expected[s]) / abs(expected[s]) for s in range(41, 61))})
      print(json.dumps(rows[-1]), flush=True)
  print(table(rows))
  (out / 'report.json').write_text(json.dumps(rows, indent=1) + '\n')


if __name__ == '__main__':
  main()
