"""The config schema: every field a run reads, with the paper's defaults, and its validation.

configs/*.py start from `defaults()` and change what their model needs; `--config.a.b=value` overrides are
applied by ml_collections afterwards, so `validate` runs on the final config, before anything is built.
"""
import dataclasses
import importlib.util
import os
import sys
import traceback

import ml_collections
from absl import app, flags, logging

from albert_jax import cpu_allocator, failures
from albert_jax.errors import ConfigError, RunError
from albert_jax.model import ModelConfig


def defaults() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  # Continued pretraining: a checkpoint to start from (albert_jax/pretrained.py): a pretraining workdir (its best
  # checkpoint, or init_step), anything from_pretrained reads (ours, HF, the original TF). The model's shape and
  # the vocabulary come from it; the optimizer and schedule start afresh. None: random weights.
  config.init = ml_collections.config_dict.placeholder(str)
  config.init_step = ml_collections.config_dict.placeholder(int)  # a workdir's checkpoint of this step
  config.model = ml_collections.ConfigDict(dataclasses.asdict(ModelConfig()))
  # Recompute in the backward pass (model.py's policies), or 'auto': training compiles its step with none, and where
  # that does not fit the devices' memory, takes the cheapest setting of this and train.grad_accum_steps that does
  # (fit.py, the fit check's own search; on a CPU nothing is checked).
  config.model.remat = 'auto'

  config.data = ml_collections.ConfigDict()
  # Comma-separated (or a list of) sources, each optionally @WEIGHT: builtin | tfds:NAME | a file format and a glob,
  # lines:GLOB | text:GLOB | wikiextractor:GLOB | gutenberg:GLOB | jsonl[FIELD]:GLOB | parquet[COLUMN]:GLOB
  # (data/sources.py; docs/data.md).
  # The paper trained on Wikipedia + BookCorpus (~3:1 in words); TFDS's books corpus is pg19.
  config.data.source = 'tfds:wikipedia/20230601.en@3,tfds:pg19@1'
  # A SentencePiece .model (e.g. the release's 30k-clean.model, or python -m albert_jax.data.vocab), or 'builtin':
  # trained once on the built-in corpus and cached.
  config.data.vocab = ml_collections.config_dict.placeholder(str)
  config.data.tfds_data_dir = ml_collections.config_dict.placeholder(str)  # None: TFDS's default
  # Where file sources' indexes (where each document lies; data/corpus_index.py) are kept, found once per corpus:
  # None is beside a corpus in a bucket (.albert_index, which a pod's hosts share), ~/.cache/albert_jax for a
  # corpus on local disk. Set it where those cannot be written (a bucket of someone else's).
  config.data.index_dir = ml_collections.config_dict.placeholder(str)
  config.data.max_seq_length = 512
  config.data.max_predictions_per_seq = 20
  config.data.masked_lm_prob = 0.15
  config.data.short_seq_prob = 0.1
  config.data.ngram = 3
  config.data.sentence_task = 'sop'  # 'sop' (ALBERT), 'nsp' (BERT) or 'none'
  config.data.eval_fraction = 0.01  # the last documents of each source, held out for evaluation
  config.data.chunk_documents = 256  # documents of one data shard turned into instances and shuffled together
  # The data shards the stream is defined on (data/pipeline.py): the global batch of every step is the same on any
  # host count that divides them, so a run moves between slices of those host counts. Fixed when a run begins and
  # kept in its workdir. 'auto': on accelerators 8 times the first slice's hosts (a power of two that divides the
  # batch), on CPUs one per host (pipeline.auto_shards).
  config.data.shards = ml_collections.config_dict.FieldReference('auto', field_type=object)
  config.data.seed = 12345
  # Background processes making batches, for hosts that feed accelerators faster than one core makes batches:
  # -1 is one per local accelerator device (at most the cores but one), none where the devices are CPUs.
  config.data.workers = -1

  config.train = ml_collections.ConfigDict()
  config.train.batch_size = 4096  # global, over all hosts
  # Microbatches per step: the batch runs in this many parts, one after another, and one update applies their
  # summed gradients, the same as one batch of the whole size: the paper's batch on a slice too small to hold it.
  # 'auto': one, unless the step does not fit the devices; then the fewest that fit (with model.remat, above).
  config.train.grad_accum_steps = ml_collections.config_dict.FieldReference('auto', field_type=object)
  config.train.num_steps = 125_000
  config.train.optimizer = 'lamb'  # or 'adamw'
  config.train.learning_rate = 0.00176
  # Fields that follow num_steps (ml_collections references): a --config.train.num_steps override moves them too,
  # unless they are set themselves. The paper's 3,125 warmup steps of 125,000.
  steps = config.train.get_ref('num_steps')
  config.train.warmup_steps = steps // 40
  config.train.poly_power = 1.0  # 1: linear decay to 0 at num_steps, counted from step 0 as the original
  config.train.weight_decay = 0.01
  config.train.beta1 = 0.9
  config.train.beta2 = 0.999
  config.train.epsilon = 1e-6
  config.train.clip_norm = 1.0
  config.train.seed = 0  # parameter init and dropout
  config.train.log_every = 100
  config.train.eval_every = (steps + 24) // 25  # 5,000 of 125,000; at least 1 however short the run
  config.train.eval_batches = 20  # of train.batch_size held-out instances each
  config.train.checkpoint_every = (steps + 24) // 25
  config.train.keep_checkpoints = 3  # the latest ones; the best by held-out MLM accuracy is kept as well
  # A hang bounded: the longest a step, a batch or an evaluation may take before the run ends with exit status 42
  # (restart) saying what it waited for; the first of each in a process (which may compile) and checkpoint saves
  # are not bounded. 0: ten times the longest of its kind so far, at least 300 s (failures.Watchdog).
  config.train.stall_seconds = 0.0
  config.train.fill_mask_text = ''  # printed at the end with fill_mask_word masked and the model's guess
  config.train.fill_mask_word = ''
  # A folder of BLiMP's minimal pairs (UID.jsonl, as distributed): with each held-out evaluation, the share of
  # blimp_pairs pairs of each paradigm (evenly spaced) whose acceptable sentence the model scores higher
  # (pseudo-log-likelihood; python -m albert_jax.blimp scores them all). None: off.
  config.train.blimp = ml_collections.config_dict.placeholder(str)
  config.train.blimp_pairs = 40
  add_profiling(config.train)

  # Device mesh: one axis may be -1 (the rest of the devices). Pure data parallelism by default.
  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = -1
  config.mesh.fsdp = 1
  config.mesh.model = 1
  # Slices joined over the data-center network (multislice): the data axis spans them, so that only gradients
  # cross slices; data, fsdp and model above are per slice.
  config.mesh.dcn_data = 1
  return config


def add_profiling(train: ml_collections.ConfigDict) -> None:
  """Profiles (albert_jax/profiling.py), the same for pretraining and fine-tuning: a trace of profile_steps steps
  from step profile_from under WORKDIR/profiles (0: none; never a start's first step, which may compile; cut short
  before an evaluation or checkpoint save unless profile_saves), on host 0 or on 'all' hosts; and a profiler server
  on profiler_port (0: none) to capture from on demand (launch.tpu profile)."""
  train.profile_steps = 0
  train.profile_from = 10
  train.profile_hosts = 'first'
  train.profile_saves = False
  train.profiler_port = 0


def finetune_defaults() -> ml_collections.ConfigDict:
  """A fine-tuning run's schema (configs/finetune/*.py start here): the original's run_classifier defaults.

  The model's shape comes from `init` (a checkpoint); `model` gives it only when init is 'none' (random weights,
  the control), and otherwise its dropout, dtype and remat settings apply to the loaded model."""
  base = defaults()
  config = ml_collections.ConfigDict()
  # A pretraining workdir (its best checkpoint by held-out MLM accuracy), anything albert_jax.from_pretrained
  # reads (ours, an HF directory, an original TF checkpoint), or 'none'.
  config.init = 'none'
  config.init_step = ml_collections.config_dict.placeholder(int)  # a workdir's checkpoint of this step, not its best
  config.model = base.model
  config.model.remat = 'none'  # ('auto' is pretraining's search; here set a policy where the step needs one)
  config.task = ml_collections.ConfigDict()
  config.task.name = ''
  config.task.data = 'tfds'  # 'tfds', or the folder or file in the original's format
  config.task.max_seq_length = 512
  config.task.classifier_dropout = 0.1  # the original's hard-coded 0.1 on the pooled output
  # Batches padded to this many fixed lengths, chosen from the training batches' longest rows (downstream/lengths.py),
  # not all to max_seq_length: the same model outputs, as many compiled shapes. 0: all padded to max_seq_length.
  config.task.length_buckets = 4
  # Training batches drawn by length too (rows of a similar length together; HF's group_by_length): least padding,
  # another order of examples. Off: the order is the seeded permutation alone.
  config.task.group_by_length = False
  # 0: every training example; N: a random N of them, drawn by train.seed (label-efficiency curves; runs of two
  # inits with one seed see the same N).
  config.task.train_examples = 0
  config.data = ml_collections.ConfigDict()
  config.data.vocab = ml_collections.config_dict.placeholder(str)  # None: the one that came with `init`
  config.data.tfds_data_dir = ml_collections.config_dict.placeholder(str)

  config.train = ml_collections.ConfigDict()
  config.train.batch_size = 32
  config.train.grad_accum_steps = 1  # microbatches per step, as in pretraining
  config.train.eval_batch_size = 32
  config.train.num_steps = 1000
  config.train.optimizer = 'adamw'  # the original fine-tunes with AdamW (no bias correction), wd 0.01, clip 1
  config.train.learning_rate = 5e-5
  config.train.warmup_steps = 0
  for name in ('poly_power', 'weight_decay', 'beta1', 'beta2', 'epsilon', 'clip_norm', 'seed'):
    config.train[name] = base.train[name]
  config.train.log_every = 100
  # Every checkpoint is evaluated on dev and the best one kept, as the original's model.ckpt-best.
  config.train.checkpoint_every = 100
  config.train.keep_checkpoints = 2  # the latest ones, besides the best
  add_profiling(config.train)
  config.mesh = base.mesh
  return config


def validate_finetune(config: ml_collections.ConfigDict, model: ModelConfig) -> None:
  """Checks a fine-tuning config against the model it will fine-tune; raises ConfigError naming the fix."""
  if not config.task.name:
    raise ConfigError('config.task.name is not set: start from a config in configs/finetune/.')
  if not 3 < config.task.max_seq_length <= model.max_position_embeddings:
    raise ConfigError(f'config.task.max_seq_length {config.task.max_seq_length} must be above 3 and at most the '
                      f'model\'s max_position_embeddings {model.max_position_embeddings}.')
  if not 0 <= config.task.classifier_dropout < 1:
    raise ConfigError(f'config.task.classifier_dropout must be in [0, 1), got {config.task.classifier_dropout}.')
  if config.task.length_buckets < 0:
    raise ConfigError(f'config.task.length_buckets must be 0 (pad to max_seq_length) or a count, got '
                      f'{config.task.length_buckets}.')
  if config.task.train_examples < 0:
    raise ConfigError(f'config.task.train_examples must be 0 (all) or a count, got {config.task.train_examples}.')
  _check_train(config.train, ('batch_size', 'grad_accum_steps', 'eval_batch_size', 'num_steps', 'log_every',
                              'checkpoint_every', 'keep_checkpoints'))


def validate(config: ml_collections.ConfigDict) -> ModelConfig:
  """Checks the whole config and returns the model's part as a ModelConfig; raises ConfigError naming the fix."""
  model = ModelConfig.from_config(config.model)
  if not config.data.max_seq_length <= model.max_position_embeddings:
    raise ConfigError(f'config.data.max_seq_length {config.data.max_seq_length} must be at most '
                      f'model.max_position_embeddings {model.max_position_embeddings}.')
  validate_data(config.data)
  train = config.train
  _check_train(train, ('batch_size', 'grad_accum_steps', 'num_steps', 'log_every', 'eval_every', 'eval_batches',
                       'checkpoint_every', 'keep_checkpoints', 'blimp_pairs'))
  if train.stall_seconds < 0:
    raise ConfigError(f'config.train.stall_seconds must be 0 (adapt to the measured step time) or a number of '
                      f'seconds, got {train.stall_seconds}.')
  if bool(train.fill_mask_text) != bool(train.fill_mask_word) or train.fill_mask_word not in train.fill_mask_text:
    raise ConfigError('config.train.fill_mask_word must be a word of config.train.fill_mask_text (or both empty).')
  return model


def validate_data(data: ml_collections.ConfigDict) -> None:
  """Checks config.data on its own (what the data pipeline reads); raises ConfigError naming the fix."""
  if not 3 < data.max_seq_length:
    raise ConfigError(f'config.data.max_seq_length {data.max_seq_length} must be above 3 ([CLS] A [SEP] B [SEP]).')
  if not 0 < data.max_predictions_per_seq <= data.max_seq_length:
    raise ConfigError(f'config.data.max_predictions_per_seq {data.max_predictions_per_seq} must be in '
                      f'1..max_seq_length ({data.max_seq_length}).')
  if data.sentence_task not in ('sop', 'nsp', 'none'):
    raise ConfigError(f"config.data.sentence_task {data.sentence_task!r}: expected 'sop', 'nsp' or 'none'.")
  if not 0 < data.masked_lm_prob < 1 or not 0 <= data.short_seq_prob <= 1 or data.ngram < 1:
    raise ConfigError('config.data: masked_lm_prob must be in (0, 1), short_seq_prob in [0, 1], ngram >= 1.')
  shards = data.get('shards', 'auto')
  if shards != 'auto' and (not isinstance(shards, int) or isinstance(shards, bool) or shards < 1):
    raise ConfigError(f'config.data.shards must be auto or a positive whole number, got {shards!r}.')
  if not 0 < data.eval_fraction < 1 or data.chunk_documents < 1 or data.workers < -1:
    raise ConfigError('config.data: eval_fraction must be in (0, 1), chunk_documents positive, and workers a count '
                      'or -1 (one per accelerator device).')


def _check_train(train: ml_collections.ConfigDict, positive: tuple) -> None:
  """What pretraining and fine-tuning both ask of config.train: the `positive` fields, the optimizer, the
  schedule."""
  for name in positive:
    if name == 'grad_accum_steps' and train[name] == 'auto':  # pretraining's: resolved by fit.py
      continue
    if not isinstance(train[name], int) or train[name] < 1:
      raise ConfigError(f'config.train.{name} must be a positive whole number'
                        f'{" or auto" if name == "grad_accum_steps" else ""}, got {train[name]!r}.')
  if train.profile_steps < 0 or train.profile_from < 1 or train.profile_hosts not in ('first', 'all') or not (
      0 <= train.profiler_port < 65536):
    raise ConfigError(f'config.train: profile_steps must be 0 (no trace) or a count, profile_from a step from 1, '
                      f"profile_hosts 'first' or 'all', profiler_port 0 (none) or a port; got {train.profile_steps}, "
                      f'{train.profile_from}, {train.profile_hosts!r}, {train.profiler_port}.')
  if train.optimizer not in ('lamb', 'adamw'):
    raise ConfigError(f"config.train.optimizer {train.optimizer!r}: expected 'lamb' or 'adamw'.")
  if not 0 <= train.warmup_steps < train.num_steps or train.learning_rate <= 0:
    raise ConfigError(f'config.train: warmup_steps ({train.warmup_steps}) must be below num_steps '
                      f'({train.num_steps}) and learning_rate positive.')



def from_file(path, arg=None) -> ml_collections.ConfigDict:
  """The config that the file at `path` (configs/*.py) builds, as `--config=path:arg` would: for config files that
  start from another one, and for benches that load several."""
  spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config() if arg is None else module.get_config(arg)


def run_cli(main) -> None:
  """absl's app.run for the command-line tools. Input a user can fix is printed alone on stderr with exit status
  2, where a traceback would bury the message: a ConfigError raised by `main`, and a flag or --config.a.b
  override that does not parse or names no field."""
  def fail(message):
    print(f'error: {message}', file=sys.stderr, flush=True)
    sys.exit(2)

  def parse(argv):
    try:
      try:
        remaining = flags.FLAGS(argv)
      except SystemExit as e:  # absl's --help prints the flags and exits 1; asking for help is not a failure
        sys.exit(0 if {'-h', '-?', '--help', '--helpshort', '--helpfull'} & set(argv[1:]) else e.code)
      config = flags.FLAGS['config'].value if 'config' in flags.FLAGS else None
      if config is not None:
        config.to_dict()  # a config file that failed to load says so only when the config is read
      return remaining
    except AttributeError as e:  # ml_collections: an override of a field that does not exist
      detail = e.args[0].args[0] if e.args and isinstance(e.args[0], KeyError) else str(e)
      fail(f'a --config override names no config field: {" ".join(str(detail).split())}')
    except Exception as e:  # pylint: disable=broad-except  (a missing or broken config file, a bad value)
      refused, cause = None, e
      while cause is not None:  # a config file's get_config refused its argument: that ConfigError, not the
        if isinstance(cause, ConfigError):  # traceback ml_collections re-raises it with
          refused = cause
        cause = cause.__context__
      fail(' '.join(str(refused or e).split()))

  def checked(argv):
    if 'jax' in sys.modules:  # a tool that runs JAX (the vocabulary's and the corpus inspector do not), before it
      cpu_allocator.reuse_freed_memory()  # allocates anything
    if not flags.FLAGS['verbosity'].present:  # TFDS and JAX log every dataset and backend they try at INFO
      logging.set_verbosity(logging.WARNING)
    try:
      return main(argv)
    except ConfigError as e:
      fail(e)
    except RunError as e:
      print(f'error: {e}', file=sys.stderr, flush=True)
      sys.exit(1)
    except Exception as e:  # pylint: disable=broad-except
      reason = failures.transient(e)
      if reason is None:  # a bug: its traceback
        raise
      logging.info('the transient failure, in full:\n%s', ''.join(traceback.format_exception(e)))
      failures.say_restart(reason)
      sys.exit(failures.RESTART)

  app.run(checked, flags_parser=parse)
