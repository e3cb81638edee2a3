"""Convert between checkpoint formats.

  python -m albert_jax.convert --input=PATH --output=DIR --to=hf|tf|albert_jax

PATH may be any format `albert_jax.from_pretrained` reads (ours, an HF AlbertForPreTraining directory, an original
TF ALBERT checkpoint). `--to=hf` writes a directory `transformers.AlbertForPreTraining.from_pretrained` loads;
`--to=tf` writes the original TF1 names and albert_config.json.
"""
import pathlib

from absl import app, flags, logging

from albert_jax import interop
from albert_jax.config import run_cli
from albert_jax.model import ModelConfig

_INPUT = flags.DEFINE_string('input', None, 'Checkpoint to read (any supported format).')
_OUTPUT = flags.DEFINE_string('output', None, 'Directory to write; must not exist or be empty.')
_TO = flags.DEFINE_enum('to', None, ['albert_jax', 'hf', 'tf'], 'Format to write.')


def main(argv):
  del argv
  output = pathlib.Path(_OUTPUT.value)
  if output.exists() and any(output.iterdir()):
    raise app.UsageError(f'--output {output} is not empty; choose a new directory (nothing is overwritten).')
  model, params, config = interop.from_pretrained(_INPUT.value)
  cfg = ModelConfig.from_config(config.model)
  if _TO.value == 'albert_jax':
    interop.save(output, params, config)
  elif _TO.value == 'hf':
    interop.save_hf(output, params, cfg)
  else:
    interop.save_tf(output, params, cfg)
  logging.info('wrote %s (%s)', output, _TO.value)
  print(f'{_INPUT.value} -> {output} ({_TO.value})')


if __name__ == '__main__':
  flags.mark_flags_as_required(['input', 'output', 'to'])
  run_cli(main)
