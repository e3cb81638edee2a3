"""Held-out evaluation of a run's newest checkpoint, on data that may differ from what it was trained on.

  python -m albert_jax.evaluate --config=configs/tiny.py --workdir=DIR --config.data.sentence_task=nsp

Give the config (and overrides, config.init included) the run was trained with; override only data fields (the
sentence task, the source, the eval batches). Paper Table 6 evaluates a model trained with one sentence task on
another this way. Prints the metrics and writes them to DIR/eval-<sentence_task>.json.
"""
import json

import jax
from absl import flags
from ml_collections import config_flags

from albert_jax import checkpoint, paths, pretrained, sharding
from albert_jax import step as step_lib
from albert_jax.config import run_cli, validate
from albert_jax.data import pipeline as pipeline_lib
from albert_jax.data import vocab as vocab_lib
from albert_jax.errors import ConfigError


def evaluate_run(config, workdir, devices=None) -> dict:
  validate(config)
  paths.check_reachable(workdir, config.init, config.data.vocab, config.data.source, config.data.tfds_data_dir)
  config, _ = pretrained.for_pretraining(config)  # a continued run's model and vocabulary are its init's
  model_config = validate(config)
  workdir = paths.path(workdir)
  checkpoint.check_workdir(workdir, config)  # the same model as the checkpoint's
  mesh = sharding.make_mesh(config.mesh, devices)
  program = step_lib.build(config, model_config.for_platform(mesh.devices.flat[0].platform), mesh)
  restored = checkpoint.restore_latest(checkpoint.manager(workdir, config.train.keep_checkpoints),
                                       program.abstract_state())
  if restored is None:
    raise ConfigError(f'{workdir} holds no checkpoint to evaluate: train first (python -m albert_jax.train).')
  step, state, _ = restored
  tokenizer = vocab_lib.load_tokenizer(config.data.vocab, config.model.vocab_size, config.data.tfds_data_dir)
  # The run's own held-out instances: its data shards, shared by this process count.
  shards = checkpoint.data_shards(workdir, config.data.shards, jax.process_count())
  pipeline_lib.check_shards(shards, jax.process_count(), config.train.batch_size)
  held_out = pipeline_lib.held_out_sets(config.data, tokenizer, config.train.batch_size, config.train.eval_batches,
                                        jax.process_index(), jax.process_count(), shards=shards)
  result = {'step': step, 'sentence_task': config.data.sentence_task,
            **{k: int(v) if k.endswith('_count') else float(v)
               for k, v in step_lib.evaluate(program, state['params'], held_out, mesh,
                                             config.data.sentence_task).items()}}
  if jax.process_index() == 0:
    (workdir / f'eval-{config.data.sentence_task}.json').write_text(json.dumps(result, indent=2) + '\n')
  return result


def main(argv):
  del argv
  result = evaluate_run(_CONFIG.value, _WORKDIR.value)
  print('  '.join(f'{k} {v:.4f}' if isinstance(v, float) else f'{k} {v}' for k, v in result.items()))


if __name__ == '__main__':
  _CONFIG = config_flags.DEFINE_config_file('config', None, 'The config the run was trained with.', lock_config=True)
  _WORKDIR = flags.DEFINE_string('workdir', None, 'The run to evaluate.')
  flags.mark_flags_as_required(['config', 'workdir'])
  run_cli(main)
