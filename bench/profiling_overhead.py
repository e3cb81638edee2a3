"""What profiling costs a run's steps: none off, the profiler server idle, a traced window of steps.

  python bench/profiling_overhead.py [--repeats=3] [--out=DIR]

Three arms of the same short run (configs/tiny.py shrunk, 160 steps, every step logged), alternated and repeated:
`off` (the peer), `server` (train.profiler_port set, nothing captured) and `window` (train.profile_steps 20 from
step 80). For each run, from its TensorBoard file, the median seconds of a step over steps 21-160, leaving out the
window's steps and the step after them (which pays for writing the trace); for the window arm also the median
of its traced steps. Reported as ratios to `off` in the same repeat, and their medians over the repeats.
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / 'bench'))
from shared import tensorboard_scalars  # noqa: E402

STEPS, WINDOW_FROM, WINDOW_STEPS = 160, 80, 20
RUN = ['--config=configs/tiny.py', f'--config.train.num_steps={STEPS}', '--config.train.warmup_steps=5',
       '--config.train.log_every=1', '--config.train.eval_every=100000', '--config.train.eval_batches=1',
       '--config.train.checkpoint_every=100000', '--config.train.fill_mask_text=', '--config.train.fill_mask_word=']
ARMS = {'off': [], 'server': ['--config.train.profiler_port=9917'],
        'window': [f'--config.train.profile_steps={WINDOW_STEPS}', f'--config.train.profile_from={WINDOW_FROM}']}
TRACED = set(range(WINDOW_FROM, WINDOW_FROM + WINDOW_STEPS + 1))  # the window, and the step that writes it out


def step_seconds(workdir: pathlib.Path) -> dict:
  """{step: seconds} from the logged steps/s of each one-step window."""
  return {step: 1 / rate for _, step, rate in tensorboard_scalars(workdir)[1]['steps_per_sec'] if rate > 0}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--out', default=None)
  args = parser.parse_args()
  out = pathlib.Path(args.out or tempfile.mkdtemp(prefix='profiling_overhead_'))
  out.mkdir(parents=True, exist_ok=True)
  rows = []
  for repeat in range(args.repeats):
    for arm, extra in ARMS.items():  # alternated: a slow spell of the machine falls on every arm alike
      workdir = out / f'{arm}-{repeat}'
      with open(out / f'{arm}-{repeat}.out', 'w') as log:
        subprocess.run([sys.executable, '-m', 'albert_jax.train', *RUN, *extra, f'--workdir={workdir}'], cwd=REPO,
                       stdout=log, stderr=subprocess.STDOUT, check=True, timeout=1800)
      seconds = step_seconds(workdir)
      untraced = [s for step, s in seconds.items() if step > 20 and step not in TRACED]
      row = {'arm': arm, 'repeat': repeat, 'step_s': statistics.median(untraced)}
      if arm == 'window':
        row['traced_step_s'] = statistics.median(seconds[s] for s in range(WINDOW_FROM, WINDOW_FROM + WINDOW_STEPS))
      rows.append(row)
      print(json.dumps(row), flush=True)
  off = {r['repeat']: r['step_s'] for r in rows if r['arm'] == 'off'}
  ratio = lambda arm, key: statistics.median(r[key] / off[r['repeat']] for r in rows if r['arm'] == arm)
  lines = [f'median seconds a step against `off` in the same repeat (medians of {args.repeats} repeats, alternated):',
           '| arm | step s (median) | vs off |', '|---|---|---|']
  for arm in ARMS:
    lines.append(f'| {arm} | {statistics.median(r["step_s"] for r in rows if r["arm"] == arm):.4f} | '
                 f'{ratio(arm, "step_s"):.3f}x |')
  lines.append(f'| window, its {WINDOW_STEPS} traced steps | '
               f'{statistics.median(r["traced_step_s"] for r in rows if r["arm"] == "window"):.4f} | '
               f'{ratio("window", "traced_step_s"):.3f}x |')
  # What every step carries with profiling off: the guard around it (its mark for traces, a no-op without one, and
  # the window's checks), timed on its own.
  import timeit  # noqa: E402  (here, after the runs, which import JAX in their own processes)
  from albert_jax import profiling
  from albert_jax.config import defaults
  window = profiling.Window(defaults().train, tempfile.mkdtemp(), 0, print, saves_after=lambda step: False)
  settings = {'model.remat': ('none', True), 'train.grad_accum_steps': (1, True)}

  def guarded_step():
    with window.guard(5, settings):
      pass
  guard = min(timeit.repeat(guarded_step, number=10_000, repeat=5)) / 10_000
  lines.append(f'the guard each step runs in, profiling off: {guard * 1e6:.2f} us, '
               f'{guard / statistics.median(off.values()):.1e} of an `off` step here')
  table = '\n'.join(lines)
  print(table)
  (out / 'result.json').write_text(json.dumps({'rows': rows, 'table': table}, indent=2) + '\n')


if __name__ == '__main__':
  main()
