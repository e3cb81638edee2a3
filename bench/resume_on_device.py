"""A pretraining run stopped by SIGTERM and resumed, on this machine's accelerator, against the same run unbroken;
and a run continued from the unbroken run's last checkpoint, which must start where that run ended.

  python bench/resume_on_device.py [--out=/tmp/albert_jax_resume] [--smoke] [-- --config.x.y=VALUE ...]

Every run is `python -m albert_jax.train --config=configs/tiny.py` on the built-in corpus (nothing to carry to a lent
machine), on an accelerator widened to a shape that uses it (H 256, 4 heads, bfloat16, sequences of 128, batches of
64, four processes making them) and long enough for the signal to land mid-run (2,000 steps; --smoke:
configs/tiny.py's shape, 60 steps, on the CPU). Four processes, two at a time: the unbroken run beside the one
stopped by SIGTERM once its first checkpoint is committed; then that one resumed, beside a run continued
(config.init) from the unbroken run's last checkpoint. Checked: the resumed run's loss at every step and its
held-out figures at the end equal the unbroken run's; the continued run's step-0 held-out figures equal the
unbroken run's last.

XLA:GPU adds some gradients (the embeddings' scatter) with atomics, in an order that differs from run to run, and
autotunes its GEMMs in each process anew, so on a GPU every run gets XLA's flags for deterministic ops and no
autotuning, or the first of the fallbacks this jaxlib accepts (an unknown XLA flag kills the process: each is tried
first); the record says which, or none, and the differences are reported as measured.

Writes resume.json (every figure, the verdicts, the device and versions) and the four runs' consoles under --out;
exits 1 where a check fails.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

from shared import tensorboard_scalars

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Autotuning left on, two processes may pick different GEMM algorithms, and so different roundings.
DETERMINISTIC_FLAGS = ('--xla_gpu_deterministic_ops=true --xla_gpu_autotune_level=0',
                       '--xla_gpu_deterministic_ops=true', '--xla_gpu_exclude_nondeterministic_ops=true')
PROBE = ('import sys, jax, flax, optax, orbax.checkpoint as ocp; print(jax.default_backend(), '
         'jax.devices()[0].device_kind, sys.version.split()[0], jax.__version__, flax.__version__, optax.__version__, '
         'ocp.__version__, sep="|")')
PREPARE = ('from albert_jax.config import from_file; from albert_jax.data import vocab; '
           'c = from_file("configs/tiny.py"); '
           'vocab.load_tokenizer(c.data.vocab, c.model.vocab_size, c.data.tfds_data_dir)')
# On an accelerator: a shape that keeps it busy for a few thousand steps in seconds; on a CPU (--smoke): the tests'.
ACCELERATOR = dict(steps=2000, first_checkpoint=500, eval_every=1000, continued_steps=50, overrides=[
    '--config.model.hidden_size=256', '--config.model.num_heads=4', '--config.model.intermediate_size=1024',
    '--config.model.embedding_size=128', '--config.model.dtype=bfloat16', '--config.model.max_position_embeddings=128',
    '--config.data.max_seq_length=128', '--config.data.max_predictions_per_seq=20', '--config.train.batch_size=64',
    '--config.data.workers=4'])  # one worker makes about 30 such batches a second (docs/data.md): four keep up
SMOKE = dict(steps=60, first_checkpoint=20, eval_every=30, continued_steps=4, overrides=[
    '--config.data.max_seq_length=64', '--config.train.batch_size=8', '--config.train.eval_batches=1'])


def probe(env: dict) -> list:
  """[backend, device kind, Python, jax, flax, optax, orbax] as a process with this environment sees them, or None
  where it cannot start (an XLA flag it does not know)."""
  run = subprocess.run([sys.executable, '-c', PROBE], env=env, capture_output=True, text=True, cwd=ROOT)
  return run.stdout.strip().splitlines()[-1].split('|') if run.returncode == 0 else None


def start(args, name: str, *extra, log: str = None) -> subprocess.Popen:
  """`python -m albert_jax.train` in OUT/NAME, its console in OUT/LOG.log (LOG: NAME unless given)."""
  shape = SMOKE if args.smoke else ACCELERATOR
  argv = [sys.executable, '-m', 'albert_jax.train', '--config=configs/tiny.py',
          f'--workdir={os.path.join(args.out, name)}', f'--config.train.num_steps={shape["steps"]}',
          f'--config.train.warmup_steps={shape["steps"] // 10}', '--config.train.log_every=1',
          f'--config.train.eval_every={shape["eval_every"]}',
          f'--config.train.checkpoint_every={shape["first_checkpoint"]}', '--config.train.fill_mask_text=',
          '--config.train.fill_mask_word=', *shape['overrides'], *args.overrides, *extra]
  console_file = open(os.path.join(args.out, f'{log or name}.log'), 'w')  # pylint: disable=consider-using-with
  return subprocess.Popen(argv, cwd=ROOT, env=args.env, stdout=console_file, stderr=subprocess.STDOUT)


def finish(process: subprocess.Popen, name: str, limit: float, stopped: bool = False) -> None:
  """Waits for the run; it must end with status 0, or 42 where it was `stopped` by SIGTERM (saved, to resume)."""
  if process.wait(timeout=limit) not in ((0, 42) if stopped else (0,)):
    raise SystemExit(f'resume_on_device: the {name} run exited with status {process.returncode}; see its log')


def console(args, name: str) -> str:
  with open(os.path.join(args.out, f'{name}.log')) as f:
    return f.read()


def scalars(args, name: str) -> dict:
  """{tag: {step: value}} of a run, a resumed run's later file winning."""
  out = {}
  for tag, points in tensorboard_scalars(os.path.join(args.out, name))[1].items():
    for _, step, value in sorted(points):
      out.setdefault(tag, {})[step] = value
  return out


def held_out_at(series: dict, step: int) -> dict:
  return {tag: values[step] for tag, values in series.items() if tag.startswith('eval_') and step in values}


def compare(first: dict, second: dict) -> dict:
  """How far two {name: value} are apart, over the names both have."""
  names = sorted(set(first) & set(second))
  differences = {name: abs(first[name] - second[name]) for name in names}
  differing = [name for name in names if differences[name] > 0]
  return {'compared': len(names), 'equal': len(names) - len(differing), 'first_differing': differing[:1],
          'max_difference': max(differences.values(), default=None)}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', default='/tmp/albert_jax_resume')
  parser.add_argument('--smoke', action='store_true', help="configs/tiny.py's shape for 60 steps, on the CPU")
  argv = sys.argv[1:] if argv is None else argv
  split = argv.index('--') if '--' in argv else len(argv)
  args = parser.parse_args(argv[:split])
  args.overrides = argv[split + 1:]
  shape = SMOKE if args.smoke else ACCELERATOR
  os.makedirs(args.out, exist_ok=True)
  started = time.time()

  # Two runs share the device: each takes its share as it needs it (XLA would otherwise take 75% at once).
  args.env = {**os.environ, 'XLA_PYTHON_CLIENT_PREALLOCATE': 'false', 'XLA_PYTHON_CLIENT_MEM_FRACTION': '0.45',
              **({'JAX_PLATFORMS': 'cpu'} if args.smoke else {})}
  found = probe(args.env)
  if not found:
    raise SystemExit('resume_on_device: JAX does not start here; `python -c "import jax; jax.devices()"` says why')
  deterministic = None
  if found[0] == 'gpu':
    for flag in DETERMINISTIC_FLAGS:
      env = {**args.env, 'XLA_FLAGS': f'{args.env.get("XLA_FLAGS", "")} {flag}'.strip()}
      if probe(env):
        args.env, deterministic = env, flag
        break
  backend, kind, *versions = found
  print(f'resume_on_device: {kind} ({backend}); deterministic ops: {deterministic or "not asked"}', flush=True)

  # The built-in corpus and its vocabulary, made once here (a fresh machine has neither) rather than by two runs at
  # once.
  subprocess.run([sys.executable, '-c', PREPARE], env=args.env, cwd=ROOT, check=True)

  # Phase 1: the unbroken run, and beside it the same run stopped by SIGTERM after its first checkpoint.
  unbroken, stopped = start(args, 'unbroken'), start(args, 'stopped')
  first = os.path.join(args.out, 'stopped', 'checkpoints', str(shape['first_checkpoint']))
  while not os.path.exists(first) and stopped.poll() is None:  # a checkpoint's folder appears when committed
    time.sleep(0.02)
  stopped.send_signal(signal.SIGTERM)
  finish(stopped, 'stopped', 600, stopped=True)
  finish(unbroken, 'unbroken', 900)
  stopped_at = re.search(r'SIGTERM at step (\d+)', console(args, 'stopped'))
  if not stopped_at:
    raise SystemExit('resume_on_device: the stopped run finished before SIGTERM reached it; raise the steps')

  # Phase 2: the stopped run resumed; beside it, a run continued from the unbroken run's last checkpoint.
  resumed = start(args, 'stopped', log='resumed')  # the same workdir: it resumes
  continued = start(args, 'continued', f'--config.init={os.path.join(args.out, "unbroken")}',
                    f'--config.train.num_steps={shape["continued_steps"]}',
                    f'--config.train.warmup_steps={shape["continued_steps"] // 2}')
  for process, name in ((resumed, 'resumed'), (continued, 'continued')):
    finish(process, name, 900)
  resumed_from = re.search(r'resumed from step (\d+)', console(args, 'resumed'))

  runs = {name: scalars(args, name) for name in ('unbroken', 'stopped', 'continued')}
  last = shape['steps']
  with open(os.path.join(args.out, 'unbroken', 'result.json')) as f:
    unbroken_result = json.load(f)
  report = {
      'date': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), 'device_kind': kind, 'backend': backend,
      'versions': dict(zip(('python', 'jax', 'flax', 'optax', 'orbax'), versions)),
      'deterministic_flag': deterministic, 'xla_flags': args.env.get('XLA_FLAGS'), 'steps': last,
      'stopped_at': int(stopped_at.group(1)), 'resumed_from': int(resumed_from.group(1)) if resumed_from else None,
      'loss': compare(runs['unbroken']['loss'], runs['stopped']['loss']),
      'held_out': compare(held_out_at(runs['unbroken'], last), held_out_at(runs['stopped'], last)),
      'held_out_unbroken': held_out_at(runs['unbroken'], last), 'held_out_resumed': held_out_at(runs['stopped'], last),
      # result.json holds float32 figures as Python floats; TensorBoard holds the same float32 values.
      'continued_start': compare({k: v for k, v in unbroken_result.items() if k.startswith('eval_')},
                                 held_out_at(runs['continued'], 0)),
      'seconds': round(time.time() - started, 1)}
  checks = {'every step logged by both': report['loss']['compared'] == last,
            'resumed from the step it stopped at': report['resumed_from'] == report['stopped_at'],
            'loss equal at every step': report['loss']['equal'] == last,
            'held-out figures equal at the end': report['held_out']['compared'] > 0
                                                  and report['held_out']['equal'] == report['held_out']['compared'],
            "continued run starts at the unbroken run's last figures": report['continued_start']['compared'] > 0
                and report['continued_start']['max_difference'] <= 1e-6}  # as tests/test_continued.py
  report['checks'] = checks
  with open(os.path.join(args.out, 'resume.json'), 'w') as f:
    json.dump(report, f, indent=2)
  def gap(name):
    return 'n/a' if report[name]['max_difference'] is None else f'{report[name]["max_difference"]:.3g}'
  print(f'stopped by SIGTERM at step {report["stopped_at"]} of {last}, resumed from {report["resumed_from"]}; loss '
        f'equal at {report["loss"]["equal"]} of {report["loss"]["compared"]} steps (largest difference '
        f'{gap("loss")}); held-out figures equal: {report["held_out"]["equal"]} of {report["held_out"]["compared"]} '
        f'(largest difference {gap("held_out")}); the continued run starts {gap("continued_start")} from where the '
        f'unbroken one ended; {report["seconds"]:.0f} s')
  for check, passed in checks.items():
    print(f'  {"pass" if passed else "FAIL"}: {check}')
  return report


if __name__ == '__main__':
  sys.exit(0 if all(main()['checks'].values()) else 1)
