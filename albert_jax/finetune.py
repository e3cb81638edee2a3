"""Fine-tune a pretrained ALBERT on a downstream task and evaluate it as the paper does.

  python -m albert_jax.finetune --config=configs/finetune/builtin.py --config.init=/tmp/albert_tiny \
      --workdir=/tmp/albert_tiny_builtin

`init` is a pretraining workdir (its best checkpoint by held-out MLM accuracy), anything
`albert_jax.from_pretrained` reads, or 'none' (random weights: the control). The same command resumes. Every
checkpoint is evaluated on dev and the best one kept (the paper's figures are best-of-checkpoints); at the end the
best is restored, scored on every dev split, and its predictions written in the leaderboards' formats. `init`,
the workdir and the task's data may be local or in a bucket (gs://).
Reads top to bottom like train.py, whose machinery it uses: mesh, compiled steps, checkpoints, progress, metrics.
"""
import hashlib
import io
import json
import sys

import flax.linen as nn
import jax
import ml_collections
import numpy as np
from absl import flags
from ml_collections import config_flags

from albert_jax import checkpoint, failures, interop, metrics, paths, pretrained, profiling, run, sharding
from albert_jax import step as step_lib
from albert_jax.config import run_cli, validate_finetune
from albert_jax.downstream import Task, builtin, glue, heads, lengths, race, squad
from albert_jax.errors import ConfigError
from albert_jax.model import ModelConfig, model_shape
from albert_jax.summary import training_flops_per_sequence


TASKS = {**{name: glue.GlueTask for name in glue.GLUE}, 'race': race.RaceTask, 'squad_v1': squad.SquadTask,
         'squad_v2': squad.SquadTask, 'builtin': builtin.BuiltinTask}


def make_task(config) -> Task:
  if config.task.name not in TASKS:
    raise ConfigError(f'config.task.name {config.task.name!r} is not a task; known: {", ".join(TASKS)}.')
  return TASKS[config.task.name](config)


def train_subset(examples: list, count: int, seed: int, task_name: str) -> list:
  """`count` of the training examples drawn without replacement by `seed` (all of them for 0), in file order."""
  if not count:
    return examples
  if count > len(examples):
    raise ConfigError(f'config.task.train_examples {count:,} is more than the {len(examples):,} {task_name} training '
                      f'examples: lower it, or set 0 for all of them.')
  return [examples[i] for i in sorted(np.random.default_rng([seed, 1]).choice(len(examples), count, replace=False))]


def evaluate(program, params, features: dict, batch_size: int, fixed: tuple, mesh) -> dict:
  """The eval step's outputs for every row of `features`, in order: batches of rows of similar length, each cut to
  its fixed length (lengths.py), the last padded with weight-0 rows."""
  host, hosts = jax.process_index(), jax.process_count()
  max_length, per_host = features['input_ids'].shape[-1], batch_size // hosts
  row_lengths = lengths.row_lengths(features)
  order, outputs = [], []
  for rows, length in lengths.evaluation_batches(row_lengths, batch_size, fixed):
    order.append(rows)
    padded = np.concatenate([rows, np.full(batch_size - len(rows), rows[-1])])[host * per_host:(host + 1) * per_host]
    batch = lengths.cut({k: v[padded] for k, v in features.items()}, length, max_length)
    batch['weights'] = np.where(np.arange(batch_size)[host * per_host:(host + 1) * per_host] < len(rows),
                                batch['weights'], 0).astype(np.float32)
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
      out = jax.device_get(program.eval_step(params, sharding.global_batch(batch, mesh)))
    outputs.append({k: v[:len(rows)] for k, v in lengths.pad_outputs(out, length, max_length).items()})
  order = np.concatenate(order)
  in_order = {}
  for k in outputs[0]:
    values = np.concatenate([o[k] for o in outputs])
    in_order[k] = np.empty_like(values)
    in_order[k][order] = values
  return in_order


def save_outputs(file, outputs: dict, features: dict) -> None:
  """The best checkpoint's raw outputs on a split (logits, span scores), what `albert_jax.ensemble` combines, with a
  digest of the split's input pieces: members are combined only over the same features."""
  buffer = io.BytesIO()
  np.savez(buffer, **outputs, features_digest=np.array(features_digest(features)))
  paths.path(file).write_bytes(buffer.getvalue())


def features_digest(features: dict) -> str:
  return hashlib.sha256(np.ascontiguousarray(features['input_ids']).tobytes()).hexdigest()


def random_init_flags(pretrained: dict) -> list:
  """The control of a pretrained checkpoint: the flags that make init 'none' (random weights) the shape of the
  checkpoint whose config.json is `pretrained`, with its vocabulary; runtime settings such as dropout come from the
  fine-tuning config, the same for both inits."""
  out = [f'--config.model.{k}={v}' for k, v in model_shape(pretrained['model']).items()]
  out.append(f'--config.data.vocab={pretrained["data"]["vocab"]}')
  if pretrained['data'].get('tfds_data_dir'):
    out.append(f'--config.data.tfds_data_dir={pretrained["data"]["tfds_data_dir"]}')
  return out


def majority_rates(features: dict) -> dict:
  """{dev split: the accuracy of always answering the most frequent training label}, the floor a classifier must
  beat (SST-2: 0.509, where a run that learnt nothing lands; a tie goes to the task's first label); empty for tasks
  without class labels (regression, spans)."""
  train = features['train'].get('label_ids')
  if train is None or not np.issubdtype(train.dtype, np.integer) or not len(train):
    return {}
  label = majority_label(train)
  return {split: float(np.mean(f['label_ids'] == label)) for split, f in features.items() if split.startswith('dev')}


def majority_label(label_ids: np.ndarray) -> int:
  """The most frequent label id; a tie goes to the first (the task's earliest label)."""
  return int(np.bincount(label_ids).argmax())


def split_prefix(split: str) -> str:
  return 'eval_' if split == 'dev' else f'eval_{split[len("dev_"):]}_'


def make_program(task: Task, platform_config: ModelConfig, train_config, mesh) -> step_lib.Program:
  """train.py's program with the task's model and head: what fine-tuning compiles (and the speed benches)."""
  model = heads.make_model(platform_config, task.head)
  dummy = task.dummy_inputs()
  return step_lib.make_program(
      model, lambda rng: model.init({'params': rng}, **dummy)['params'],
      lambda params, batch, rng, deterministic, norms: task.loss(model, params, batch, rng, deterministic, norms),
      task.normalizers, lambda params, batch: task.predict(model, params, batch), train_config, mesh)


def finetune_and_evaluate(config: ml_collections.ConfigDict, workdir: str, devices=None) -> dict:
  """Fine-tunes (or resumes) the run in `workdir`; returns the best checkpoint's dev metrics."""
  # ---- Config, starting point and workdir: every check before anything expensive.
  paths.check_reachable(config.init, workdir, config.task.data, config.data.vocab, config.data.tfds_data_dir)
  workdir = paths.make_folder(workdir)
  start = pretrained.load(config)  # the checkpoint's shape, parameters and vocabulary (config.model's for 'none')
  model_config = start.model
  validate_finetune(config, model_config)
  config = ml_collections.ConfigDict(config.to_dict())  # unlocked copy: the model actually fine-tuned is recorded
  config.model = ml_collections.ConfigDict(model_config.__dict__)
  mesh = run.check_workdir_and_make_mesh(workdir, config, devices)
  for name in ('batch_size', 'eval_batch_size'):
    sharding.check_batch_size(config.train[name], mesh, f' (config.train.{name})',
                              config.train.grad_accum_steps if name == 'batch_size' else 1)
  platform_config = model_config.for_platform(mesh.devices.flat[0].platform)  # model.attention: cuDNN on a GPU
  host, hosts = jax.process_index(), jax.process_count()
  say = run.host_voice()
  tokenizer = pretrained.tokenizer(config, start)
  task = make_task(config)
  if host == 0:
    (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2) + '\n')

  # ---- Data: every split read, checked and turned into features before training starts.
  splits = task.splits()
  splits['train'] = (train_subset(splits['train'][0], config.task.train_examples, config.train.seed, task.name),
                     None)
  features = {split: task.features(examples, tokenizer, split) for split, (examples, _) in splits.items()}
  majority = majority_rates(features)
  max_length = config.task.max_seq_length
  batches = lengths.TrainingBatches(lengths.row_lengths(features['train']), config.train.batch_size,
                                    config.train.seed, config.task.group_by_length, config.task.length_buckets,
                                    max_length, config.train.num_steps, host, hosts)
  fixed = lengths.with_evaluation(batches.fixed, features, max_length)

  def majority_text(key: str) -> list:
    """Beside a dev split's accuracy, what always answering the training set's most frequent label scores there."""
    split = next((s for s in majority if key == f'{split_prefix(s)}accuracy'), None)
    return [f'majority {majority[split]:.3f}'] if split else []
  say(f'{task.name}: ' + ', '.join(f'{split} {len(examples):,}' for split, (examples, _) in splits.items()) +
      f' examples; starting from {start.description}')

  # ---- Model, optimizer, shardings and the compiled train step (train.py's program, with the task's head).
  program = make_program(task, platform_config, config.train, mesh)
  abstract_state = program.abstract_state()
  # One compiled step per fixed length the training batches are padded to (the longest first: out of memory there
  # is found before the others compile).
  train_steps = {}
  for length in sorted(batches.fixed, reverse=True):
    abstract_batch = {k: jax.ShapeDtypeStruct((config.train.batch_size, *v.shape[1:]), v.dtype,
                                              sharding=program.batch_sharding)
                      for k, v in lengths.cut(features['train'], length, max_length).items()}
    train_steps[length] = run.compile_step(
        program, abstract_state, abstract_batch, mesh, 'fine-tuning',
        'lower config.train.batch_size, or set train.grad_accum_steps or model.remat')

  # ---- State: the newest complete checkpoint, else the pretrained parameters under a new head.
  checkpoints = checkpoint.manager(workdir, config.train.keep_checkpoints, best_metric=task.metric)
  restored = checkpoint.restore_latest(checkpoints, abstract_state)
  with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
    if restored:
      first_step, state, _ = restored
      say(f'resumed from step {first_step} in {workdir}')
    else:
      first_step = 0
      state = program.new_state(jax.random.key(config.train.seed))
      if start.params is not None:  # the encoder's; the task's head is new (span heads have no pooler)
        state = pretrained.into_state(state, start.params, program.state_sharding, interop.BACKBONE)

  score = lambda params, split: task.score(evaluate(program, params, features[split], config.train.eval_batch_size,
                                                    fixed, mesh), splits[split][0], features[split], split,
                                           split_prefix(split))

  # ---- The loop: train; at every checkpoint, score dev and save with the score.
  sequences = int(np.prod(features['train']['input_ids'].shape[1:-1]))  # per example: RACE has 4 (one per option)
  flops_per_step = {length: training_flops_per_sequence(model_config, length, 0) * sequences *
                    config.train.batch_size for length in train_steps}
  loop = run.Loop(workdir, config.train.num_steps, flops_per_step[max(train_steps)], mesh)
  say(f'{workdir}: {sum(x.size for x in jax.tree.leaves(program.abstract_params)):,} parameters, mesh '
      f'{dict(mesh.shape)}, {hosts} host(s); best checkpoint by dev {task.metric}; batches padded to '
      f'{", ".join(map(str, sorted(train_steps)))} of {max_length} positions'
      + (', grouped by length' if config.task.group_by_length else ''))
  profile = profiling.Window(config.train, workdir, first_step, say, saves_after=lambda s: s == config.train.num_steps
                             or s % config.train.checkpoint_every == 0, finish=lambda: loop.finish(checkpoints))
  program_settings = {'model.remat': (config.model.remat, True),
                      'train.grad_accum_steps': (config.train.grad_accum_steps, True)}
  step = first_step
  while step < config.train.num_steps:
    rows, length = batches(step)
    batch = lengths.cut({k: v[rows] for k, v in features['train'].items()}, length, max_length)
    with profile.guard(step + 1, program_settings):
      with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
        state, step_metrics = train_steps[length](state, sharding.global_batch(batch, mesh))
      loop.progress.add(config.train.batch_size, int(batch['input_mask'].sum()) * hosts, flops_per_step[length])
      step += 1
      step_metrics = jax.device_get(step_metrics)
    loop.check_finite(step, step_metrics, checkpoints, 'lower train.learning_rate')
    step_metrics.pop('sums')
    if step % config.train.log_every == 0 or step == config.train.num_steps:
      report = {**step_metrics, **loop.progress.report(step), **metrics.memory_in_use()}
      loop.writer.scalars(step, report)
      say(f'step {step}/{config.train.num_steps}  loss {report["loss"]:.4f}  {metrics.Progress.line(report)}')
    is_last, preempted = step == config.train.num_steps, loop.preempted(step)
    if step % config.train.checkpoint_every == 0 or is_last:
      dev = score(state['params'], 'dev')
      loop.writer.scalars(step, dev)
      say(f'step {step} dev: ' + '  '.join(f'{k[5:]} {v:.4f}' + ''.join(f' ({t})' for t in majority_text(k))
                                           for k, v in dev.items() if not k.endswith('_count')))
      checkpoint.save(checkpoints, step, state, {'step': step}, {task.metric: float(dev[task.metric])}, force=True)
      loop.writer.flush()  # the curves in a bucket keep up with the checkpoints
    elif preempted:
      checkpoint.save(checkpoints, step, state, {'step': step}, force=True)
    if preempted:
      loop.finish(checkpoints)
      say(f'SIGTERM at step {step}: checkpoint saved; exiting with status 42 so that the run resumes when started '
          f'again')
      return {'preempted_at': step}
  loop.finish(checkpoints)

  # ---- The best checkpoint: scored on every dev split, its predictions written.
  best_step = checkpoints.best_step()
  best = checkpoint.restore_state(checkpoints, best_step, abstract_state)['params']
  # 'score': the selection metric on a 0-1 scale (SQuAD's are percentages), what a sweep's report averages.
  result = {'best_step': best_step, 'metric': task.metric}
  predictions = workdir / 'predictions'
  for split, (examples, leaderboard_file) in splits.items():
    if split == 'train':
      continue
    outputs = evaluate(program, best, features[split], config.train.eval_batch_size, fixed, mesh)
    if split.startswith('dev'):
      result.update(task.score(outputs, examples, features[split], split, split_prefix(split)))
    if host == 0:
      predictions.mkdir(parents=True, exist_ok=True)
      for name, text in task.prediction_files(outputs, examples, split, leaderboard_file).items():
        (predictions / name).write_text(text)
      save_outputs(predictions / f'outputs-{split}.npz', outputs, features[split])
  result.update({f'{split_prefix(split)}majority': rate for split, rate in majority.items()})
  result['score'] = result[task.metric] / task.scale
  if host == 0:
    (workdir / 'result.json').write_text(json.dumps(result, indent=2) + '\n')
    # The best model in the albert_jax format, with its head: from_pretrained loads it, convert exports it to HF.
    if all(x.is_fully_replicated or x.is_fully_addressable for x in jax.tree.leaves(best)):
      exported = interop.full_config(model_config)
      exported.head = task.head
      interop.save(workdir / 'best', jax.device_get(best), exported)
    else:  # parameters sharded over hosts: the orbax checkpoint of best_step holds them
      say(f'the best model is checkpoint {best_step} (parameters sharded over hosts: no best/ export)')
  say(f'best checkpoint: step {best_step}; ' + '  '.join(
      f'{k} {v:.4f} (' + ', '.join([f'n {result[k + "_count"]:,}', *majority_text(k)]) + ')' for k, v in result.items()
      if f'{k}_count' in result and isinstance(v, float)))
  return result


def main(argv):
  del argv
  if 'preempted_at' in finetune_and_evaluate(flags.FLAGS.config, flags.FLAGS.workdir):
    sys.exit(failures.RESTART)


if __name__ == '__main__':
  # Defined here, not on import, as in train.py: modules that import this one keep their own flags.
  config_flags.DEFINE_config_file('config', None, 'Path to a config in configs/finetune/.', lock_config=True)
  flags.DEFINE_string('workdir', None, 'Directory for checkpoints, TensorBoard files, results, predictions.')
  flags.mark_flags_as_required(['config', 'workdir'])
  run_cli(main)
