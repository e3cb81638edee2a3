"""Convert between checkpoint formats.

  python -m albert_jax.convert --input=PATH --output=DIR --to=hf|tf|albert_jax [--step=N]

PATH may be any format `albert_jax.from_pretrained` reads: a pretraining workdir (its best checkpoint by held-out
MLM accuracy, or --step), ours (pretrained or fine-tuned), an HF AlbertForPreTraining or downstream directory, an
original TF ALBERT checkpoint. PATH and DIR may be local or in a bucket (gs://). `--to=hf` writes a directory that
`transformers.AlbertForPreTraining.from_pretrained` loads, or for a fine-tuned model the HF class of its head
(AlbertForSequenceClassification, ...ForMultipleChoice, ...ForQuestionAnswering), with its vocabulary as HF's ALBERT
releases carry it (spiece.model, tokenizer_config.json), which AutoTokenizer loads; `--to=tf` writes the original
TF1 names and albert_config.json (pretraining models).
"""
from absl import app, flags, logging

from albert_jax import interop, paths
from albert_jax.config import run_cli
from albert_jax.errors import ConfigError
from albert_jax.model import ModelConfig

_INPUT = flags.DEFINE_string('input', None, 'Checkpoint to read (any supported format).')
_OUTPUT = flags.DEFINE_string('output', None, 'Directory to write; must not exist or be empty.')
_TO = flags.DEFINE_enum('to', None, ['albert_jax', 'hf', 'tf'], 'Format to write.')
_VOCAB = flags.DEFINE_string('vocab', None, 'With --to=hf: the SentencePiece model to carry (default: the '
                             'run\'s data.vocab, or the spiece.model or one *.model beside --input).')
_STEP = flags.DEFINE_integer('step', None, 'With a pretraining workdir as --input: the checkpoint of this step '
                             '(default: the best by held-out MLM accuracy).')


def main(argv):
  del argv
  paths.check_reachable(_INPUT.value, _OUTPUT.value)
  output = paths.path(_OUTPUT.value)
  if output.exists() and any(output.iterdir()):
    raise app.UsageError(f'--output {output} is not empty; choose a new directory (nothing is overwritten).')
  if _TO.value == 'tf':
    interop.import_tensorflow('--to=tf')  # before reading anything
  config, params, source = interop.read(_INPUT.value, _STEP.value)
  cfg = ModelConfig.from_config(config.model)
  if _TO.value == 'albert_jax':
    interop.save(output, params, config)
  elif _TO.value == 'hf':
    tokenizer = interop.tokenizer_of(_INPUT.value, config, _VOCAB.value)
    if tokenizer is None:
      raise ConfigError(f'{_INPUT.value} names no vocabulary, and an HF directory without one tokenizes every word '
                        f'as <unk>: give --vocab=FILE.model, the SentencePiece model it was trained with.')
    interop.save_hf(output, params, cfg, config.get('head'), tokenizer)
  elif config.get('head'):
    raise app.UsageError(f'{_INPUT.value} is a fine-tuned {config.head.architecture}: the original TF format here '
                         f'holds pretraining models only; use --to=hf or --to=albert_jax.')
  else:
    interop.save_tf(output, params, cfg)
  logging.info('wrote %s (%s)', output, _TO.value)
  print(f'{source} -> {output} ({_TO.value})')


if __name__ == '__main__':
  flags.mark_flags_as_required(['input', 'output', 'to'])
  run_cli(main)
