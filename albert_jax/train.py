"""Pretrain ALBERT.

  python -m albert_jax.train --config=configs/tiny.py --workdir=/tmp/albert_tiny [--config.train.num_steps=500]
  python -m albert_jax.train --config=CONFIG --config.init=CHECKPOINT --workdir=DIR     # continued pretraining

The same command resumes: a workdir with checkpoints continues from the newest complete one, data included (and a
continued run's own checkpoints come before its init). It ends with status 0 (finished), 2 (bad input, named in one
line) or 42 (start it again: a lost host, a hang, storage failing, SIGTERM after a checkpoint; failures.py).
Reads top to bottom in the order things happen: config and workdir, mesh, data, model and optimizer, state
(restored or new), compiled steps, the loop (log, evaluate, checkpoint), and a closing report.
"""
import gc
import json
import os
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import flags
from ml_collections import config_flags

from albert_jax import accelerators, blimp, checkpoint, failures, fit, goodput, metrics, paths, pretrained, profiling
from albert_jax import run, sharding
from albert_jax import step as step_lib
from albert_jax.config import run_cli, validate
from albert_jax.data import pipeline as pipeline_lib
from albert_jax.data.tokenizer import CLS, MASK, SEP
from albert_jax.summary import training_flops_per_sequence

def all_hosts(data_state: dict) -> dict:
  """The whole run's data state in one record, every shard's position (a checkpoint is written once for all hosts;
  each host serves as many shards of as many sources)."""
  if jax.process_count() == 1:
    return pipeline_lib.run_state([data_state])
  from jax.experimental import multihost_utils
  shape = np.array(data_state['shards']).shape  # (this host's shards, sources, 3)
  numbers = np.array([data_state['step']] + np.ravel(data_state['shards']).tolist(), np.int64)
  table = multihost_utils.process_allgather(numbers)
  return pipeline_lib.run_state([{**data_state, 'step': int(row[0]), 'shards': row[1:].reshape(shape).tolist()}
                                 for row in table])


def fill_mask_example(model, params, tokenizer, text: str, word: str) -> str:
  """`text` with `word` masked (all its pieces), and the model's five best guesses for its first piece."""
  ids = list(tokenizer.encode([text])[0])
  word_ids = list(tokenizer.encode([word])[0])
  start = next(i for i in range(len(ids)) if ids[i:i + len(word_ids)] == word_ids)
  positions = list(range(start + 1, start + 1 + len(word_ids)))  # +1 for [CLS]
  tokens = np.array([[CLS] + ids + [SEP]], np.int32)
  tokens[0, positions] = MASK
  logits = np.asarray(model.apply({'params': params}, jnp.asarray(tokens),
                                  masked_lm_positions=jnp.asarray([positions])).mlm_logits[0, 0])
  probs = np.exp(logits - logits.max())
  probs /= probs.sum()
  guesses = ', '.join(f'{tokenizer.decode_pieces([i])[0]!r} {probs[i]:.0%}' for i in np.argsort(-probs)[:5])
  masked = text.replace(f' {word} ', ' [MASK] ', 1) if f' {word} ' in text else text.replace(word, '[MASK]', 1)
  return f'{masked}\n    answer {word!r}; model: {guesses}'


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, devices=None, started: float = None) -> dict:
  """Trains (or resumes) the run in `workdir`; returns the final held-out metrics. `started`: when the run's
  start-up began (the command line's: its process's start), for the goodput record; default now."""
  clock = goodput.Clock(started or time.time())  # where the time goes
  # ---- Config, starting point and workdir: every check before anything expensive.
  validate(config)
  paths.check_reachable(workdir, config.init, config.data.vocab, config.data.source, config.data.tfds_data_dir,
                        config.data.index_dir, config.train.blimp)
  # With config.init, continued pretraining: the checkpoint's shape and vocabulary, contradictions refused, and its
  # weights, read now unless the workdir has checkpoints of its own to resume from; else random weights of
  # config.model's shape.
  config, start = pretrained.for_pretraining(config, read_weights=not checkpoint.has_steps(workdir))
  validate(config)
  workdir = paths.make_folder(workdir)
  mesh = run.check_workdir_and_make_mesh(workdir, config, devices)
  sharding.check_batch_size(config.train.batch_size, mesh)  # its split into microbatches: with the fit, below
  host, hosts = jax.process_index(), jax.process_count()
  say = run.host_voice()
  # The data stream's shards: those the run began with, else data.shards ('auto': pipeline.auto_shards for this
  # slice); a run continues on any host count that divides them.
  shards = checkpoint.data_shards(workdir, config.data.shards, pipeline_lib.auto_shards(
      config.train.batch_size, hosts, mesh.devices.flat[0].platform))
  pipeline_lib.check_shards(shards, hosts, config.train.batch_size)
  config = config.copy_and_resolve_references()
  with config.unlocked():
    del config.data['shards']  # a count where 'auto' may have been: a field of another type
    config.data.shards = shards  # kept in the workdir's config.json
  # A missing or mismatched vocabulary stops here.
  tokenizer = pretrained.tokenizer(config, start)
  if host == 0:
    (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2) + '\n')
    (workdir / 'run.json').write_text(json.dumps({
        'devices': len(mesh.devices.flat), 'device_kind': jax.devices()[0].device_kind, 'mesh': dict(mesh.shape),
        'hosts': hosts, 'batch_per_host': config.train.batch_size // hosts, 'vocab': tokenizer.path,
        'jax': jax.__version__}, indent=2) + '\n')
  # From here the attempt is on record (host 0's goodput.json): one that fails before its loop, reading data,
  # compiling or restoring, counts as a restart too.
  clock.on(accelerators.slice_words(mesh.devices.flat[0].device_kind, len(mesh.devices.flat), hosts))
  ledger = goodput.Ledger(workdir, clock, enabled=host == 0)

  # ---- Data: this host's shards of the training documents, and of the held-out ones.
  # Each source opened once, for both; a file source's index read, or first made by the hosts together.
  opened = pipeline_lib.open_sources(config.data, host, hosts)
  train_data = pipeline_lib.Pipeline(config.data, tokenizer, config.train.batch_size, 'train', host, hosts,
                                     opened=opened, shards=shards,
                                     workers=pipeline_lib.worker_count(config.data.workers, jax.local_devices()))
  held_out = pipeline_lib.held_out_sets(config.data, tokenizer, config.train.batch_size, config.train.eval_batches,
                                        host, hosts, opened, shards)
  grammar = blimp.HeldOut(config, tokenizer) if config.train.blimp else None  # BLiMP's pairs, if asked

  # ---- Model, optimizer, where every array lives, and the train step compiled ahead of time, with model.remat and
  # train.grad_accum_steps where 'auto' the cheapest that fits the devices' memory (fit.py: the fit check's search,
  # tried first as at the run's last start): a setting that does not fit stops here, before a checkpoint is
  # restored or a batch is made.
  devices = devices if devices is not None else jax.devices()
  given = config
  with clock.phase('compile'):
    config, fitted, chosen = fit.choose(config, devices, remembered=fit.remembered(workdir, config, devices))
  if chosen:
    say(chosen)
    if host == 0:
      fit.remember(workdir, given, devices, fitted)
  program, train_step = fitted.program, fitted.compiled
  model_config = validate(config).for_platform(mesh.devices.flat[0].platform)  # model.attention: cuDNN on a GPU
  abstract_state = program.abstract_state()
  if mesh.devices.flat[0].platform != 'cpu' and fitted.peak:  # XLA:CPU's figure undercounts
    say(f'train step compiled: peak {fitted.peak / 2 ** 20:,.1f} MiB per device')

  # ---- State: the newest complete checkpoint, else a fresh start.
  checkpoints = checkpoint.manager(workdir, config.train.keep_checkpoints)
  restored = checkpoint.restore_latest(checkpoints, abstract_state)
  with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
    if restored:
      first_step, state, data_state = restored
      train_data.restore(data_state)  # this host's shards' positions, saved on any host count
      say(f'resumed from step {first_step} in {workdir}' +
          (f' (its own checkpoints come first: config.init {config.init} gave the shape, its weights are not read)'
           if start.init else ''))
      was = pipeline_lib.by_shard(data_state)['host_count']
      if was not in (None, hosts):
        micro = config.train.grad_accum_steps
        say(f'resuming step {first_step} on {hosts} host(s) (was {was}): global batch {config.train.batch_size} '
            + (f'as {micro} microbatches of {config.train.batch_size // micro} ' if micro > 1 else '')
            + f'per step; the data stream continues at step {first_step}')
    else:
      first_step = 0
      state = program.new_state(jax.random.key(config.train.seed))
      if start.init:  # every part the checkpoint has; the optimizer and schedule from step 0
        state = pretrained.into_state(state, start.params, program.state_sharding, list(start.params))
        fresh = [part for part in state['params'] if part not in start.params]
        say(f'starting from {start.description}' +
            (f' (it has no {" and no ".join(fresh)}: new, from random weights)' if fresh else ''))
  clock.resumes_from(first_step)

  def evaluate(params) -> dict:
    result = step_lib.evaluate(program, params, held_out, mesh, config.data.sentence_task)
    return {**result, **grammar(program.model, params)} if grammar else result

  # ---- The loop.
  flops_per_step = training_flops_per_sequence(model_config, config.data.max_seq_length,
                                               config.data.max_predictions_per_seq) * config.train.batch_size
  loop = run.Loop(workdir, config.train.num_steps, flops_per_step, mesh, ledger, config.train.stall_seconds)
  say(f'{workdir}: {sum(x.size for x in jax.tree.leaves(program.abstract_params)):,} parameters, mesh '
      f'{dict(mesh.shape)}, {hosts} host(s); MFU against {loop.peak:.3g} FLOP/s per device ({loop.peak_source})')
  if first_step == 0:
    with clock.phase('evaluate'):
      first_eval = evaluate(state['params'])
  else:
    first_eval = None
  if first_eval:
    loop.writer.scalars(0, first_eval)
  eval_metrics = first_eval or {}
  # What exists now (JAX's, Flax's and the compiled programs' objects, the sources' indexes) lives as long as the
  # run: frozen, Python's full garbage collections no longer walk it. They did, every few seconds, pausing the
  # loop for up to 61 ms each (12% of the time of serving batches; bench/serving.py in docs/benchmarks.md).
  # loop.finish gives it back.
  gc.collect()
  gc.freeze()
  profile = profiling.Window(
      config.train, workdir, first_step, say, saves_after=lambda s: s == config.train.num_steps or not (
          s % config.train.eval_every and s % config.train.checkpoint_every),
      finish=lambda: loop.finish(checkpoints, close=[train_data]))
  remat_auto, microbatches_auto = fit.autos(given)
  program_settings = {'model.remat': (config.model.remat, not remat_auto),
                      'train.grad_accum_steps': (config.train.grad_accum_steps, not microbatches_auto)}
  step = first_step
  clock.loop_begins()
  with clock.phase('input'):
    batch = train_data.next_batch() if step < config.train.num_steps else None
  while step < config.train.num_steps:
    with profile.guard(step + 1, program_settings):
      with clock.phase('steps'), jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
        state, step_metrics = train_step(state, sharding.global_batch(batch, mesh))
      # Tokens: this host's real (unpadded) count times the hosts, without a collective per step.
      loop.progress.add(config.train.batch_size, int(batch['input_mask'].sum()) * hosts)
      step += 1
      data_state = train_data.state()  # the state that produces the *next* batch: saved with this step
      with clock.phase('input') as making:  # overlaps the device's work
        batch = train_data.next_batch() if step < config.train.num_steps else None
      if not step_metrics['loss'].is_ready():  # the device was busy all along: that was step time, not waiting
        clock.overlapped(making.seconds)
      with clock.phase('steps'):
        step_metrics = jax.device_get(step_metrics)
    clock.step_done(step)
    loop.check_finite(step, step_metrics, checkpoints, 'lower train.learning_rate or raise train.warmup_steps',
                      close=[train_data])
    if step % config.train.log_every == 0 or step == config.train.num_steps:
      report = {**step_lib.rates(step_metrics.pop('sums')), **step_metrics, **loop.progress.report(step),
                **metrics.memory_in_use()}
      task = config.data.sentence_task
      if task == 'none':  # single segments, all labelled 0, and an untrained head: no sentence figure to give
        report = {k: v for k, v in report.items() if not k.startswith('sop_')}
      loop.log(step, report)
      # The sentence task's accuracy under its own name.
      pairs = f'{task}_acc {report["sop_accuracy"]:.3f}  ' if 'sop_accuracy' in report else ''
      say(f'step {step}/{config.train.num_steps}  loss {report["loss"]:.4f}  mlm_acc {report["mlm_accuracy"]:.3f}  '
          f'{pairs}{metrics.Progress.line(report)}')
    is_last = step == config.train.num_steps
    if step % config.train.eval_every == 0 or is_last:
      with clock.phase('evaluate'):
        eval_metrics = evaluate(state['params'])
      loop.writer.scalars(step, eval_metrics)
      say(f'step {step} held-out: {metrics.held_out_line(eval_metrics)}')
    preempted = loop.preempted(step)
    if step % config.train.checkpoint_every == 0 or is_last or preempted:
      evaluated_now = step % config.train.eval_every == 0 or is_last  # only then is there a metric to rank by
      best_metric = {checkpoint.BEST_METRIC: float(eval_metrics['eval_mlm_accuracy'])} if evaluated_now else None
      with clock.phase('checkpoint'):
        checkpoint.save(checkpoints, step, state, all_hosts(data_state), best_metric, force=True)
        loop.saved(step)
    if preempted:
      loop.finish(checkpoints, close=[train_data])
      say(f'SIGTERM at step {step}: checkpoint saved; exiting with status 42 so that the run resumes when started '
          f'again')
      return {'preempted_at': step, **eval_metrics}
  loop.finish(checkpoints, close=[train_data])
  say(goodput.table(loop.ledger.attempts()))

  # ---- Closing report (a run resumed at its last step has trained nothing now: evaluate it for the report).
  result = {k: int(v) if k.endswith('_count') else float(v)
            for k, v in (eval_metrics or evaluate(state['params'])).items()}
  if host == 0:
    (workdir / 'result.json').write_text(json.dumps({'step': step, **result}, indent=2) + '\n')
  if first_eval:
    say(metrics.held_out_change(first_eval, result, config.data.sentence_task))
  readable = all(x.is_fully_replicated or x.is_fully_addressable for x in jax.tree.leaves(state['params']))
  if host == 0 and config.train.fill_mask_text and readable:  # not when parameters are sharded over hosts
    params = jax.device_get(state['params'])
    say('fill in the mask: ' + fill_mask_example(program.model, params, tokenizer, config.train.fill_mask_text,
                                                 config.train.fill_mask_word))
  return result


def main(argv):
  del argv
  if flags.FLAGS.distributed and not os.environ.get(failures.SUPERVISED):
    # A lost peer aborts this process from C++: a child trains, and this one turns that into one line.
    sys.exit(failures.supervise('albert_jax.train', sys.argv[1:]))
  if flags.FLAGS.distributed:
    jax.distributed.initialize(coordinator_address=flags.FLAGS.coordinator_address,
                               num_processes=flags.FLAGS.num_processes, process_id=flags.FLAGS.process_id,
                               initialization_timeout=120, heartbeat_timeout_seconds=flags.FLAGS.heartbeat_timeout)
  if 'preempted_at' in train_and_evaluate(flags.FLAGS.config, flags.FLAGS.workdir,
                                          started=goodput.process_start_time()):
    sys.exit(failures.RESTART)


if __name__ == '__main__':
  # Defined here, not on import, as in finetune.py: modules that import this one (sweeps, tests, finetune's
  # neighbours) keep their own flags.
  config_flags.DEFINE_config_file('config', None, 'Path to a config file in configs/.', lock_config=True)
  flags.DEFINE_string('workdir', None, 'Directory for checkpoints, TensorBoard files and the config.')
  flags.DEFINE_bool('distributed', False, 'Call jax.distributed.initialize() first: needed on multi-host TPU pods '
                    '(where it finds its peers itself) and for several local processes.')
  # Elsewhere than TPU VMs (which JAX asks itself), the launcher may set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES
  # and JAX_PROCESS_ID for each process instead.
  flags.DEFINE_string('coordinator_address', None, 'host:port of process 0 (not needed on TPU VMs; default '
                      '$JAX_COORDINATOR_ADDRESS).')
  flags.DEFINE_integer('num_processes', int(os.environ.get('JAX_NUM_PROCESSES', 0)) or None,
                       'Number of processes (not needed on TPU VMs; default $JAX_NUM_PROCESSES).')
  flags.DEFINE_integer('process_id', int(os.environ['JAX_PROCESS_ID']) if 'JAX_PROCESS_ID' in os.environ else None,
                       'This process (not needed on TPU VMs; default $JAX_PROCESS_ID).')
  flags.DEFINE_integer('heartbeat_timeout', failures.HEARTBEAT_TIMEOUT, 'Seconds without a heartbeat after which '
                       'a process counts as lost: the others then stop, with exit status 42 (restart).')
  flags.mark_flags_as_required(['config', 'workdir'])
  run_cli(main)
