"""Configs load, carry the released shapes, and broken configs fail early with a message naming the fix."""
import pytest

from albert_jax.config import validate
from albert_jax.errors import ConfigError
from albert_jax.model import ModelConfig
from conftest import load_config as load_config_file

CONFIGS = ['tiny', 'base', 'large', 'xlarge', 'xxlarge', 'bert_base', 'bert_large', 'bert_xlarge']


def load_config(name):
  return load_config_file(f'configs/{name}.py')


@pytest.mark.parametrize('name', CONFIGS)
def test_every_config_validates(name):
  assert isinstance(validate(load_config(name)), ModelConfig)


# albert-original.md section 2.5: the released v2 configs (H, L, heads, FFN), E 128, V 30000, no dropout.
RELEASED = {'base': (768, 12, 12, 3072), 'large': (1024, 24, 16, 4096), 'xlarge': (2048, 24, 16, 8192),
            'xxlarge': (4096, 12, 64, 16384)}


@pytest.mark.parametrize('name', RELEASED)
def test_albert_configs_are_the_released_shapes(name):
  m = load_config(name).model
  assert (m.hidden_size, m.num_layers, m.num_heads, m.intermediate_size) == RELEASED[name]
  assert (m.embedding_size, m.vocab_size, m.max_position_embeddings, m.type_vocab_size) == (128, 30000, 512, 2)
  assert (m.sharing, m.num_groups, m.inner_group_num, m.hidden_act) == ('all', 1, 1, 'gelu')
  assert m.dropout_rate == m.attention_dropout_rate == 0.0


@pytest.mark.parametrize('name', ['bert_base', 'bert_large', 'bert_xlarge'])
def test_bert_configs_are_unfactorized_and_unshared(name):
  m = load_config(name).model
  assert m.embedding_size == m.hidden_size and m.sharing == 'none'


@pytest.mark.parametrize('change, message', [
    (dict(num_heads=7), 'not divisible by num_heads 7'),
    (dict(num_layers=12, num_groups=5), 'not divisible by num_groups 5'),
    (dict(sharing='attn'), "unknown sharing 'attn'"),
    (dict(sharing='none', num_groups=2), "needs sharing='all'"),
    (dict(hidden_act='swish'), "unknown hidden_act 'swish'"),
    (dict(remat='some'), "unknown remat 'some'"),
    (dict(dtype='float8'), "dtype 'float8'"),
    (dict(dropout_rate=1.0), 'dropout_rate must be in [0, 1)'),
    (dict(num_layers=0), 'num_layers must be a positive integer'),
])
def test_bad_model_fields_are_refused_with_the_fix(change, message):
  config = load_config('base')
  config.model.update(change)
  with pytest.raises(ConfigError, match=message.replace('[', r'\[').replace(')', r'\)').replace('(', r'\(')):
    validate(config)


def test_unknown_model_field_suggests_the_closest_name():
  with pytest.raises(ConfigError, match="unknown field 'num_layer'. Did you mean 'num_layers'"):
    ModelConfig.from_config({'num_layer': 3})


def test_sequence_longer_than_position_table_is_refused():
  config = load_config('tiny')
  config.data.max_seq_length = config.model.max_position_embeddings + 1
  with pytest.raises(ConfigError, match=f'at most model.max_position_embeddings {config.model.max_position_embeddings}'):
    validate(config)


def parsed(*argv):
  """The config as the command line builds it: --config=FILE then --config.a.b=value overrides, applied by
  ml_collections' own flag parser, as every CLI here does."""
  import sys
  from unittest import mock
  from absl import flags
  from ml_collections import config_flags
  argv = ['prog', *argv]
  values = flags.FlagValues()
  with mock.patch.object(sys, 'argv', argv):  # where ml_collections looks for the overrides' names
    config_flags.DEFINE_config_file('config', flag_values=values)
    values(argv)
  return values.config


def test_a_num_steps_override_moves_the_schedule_that_follows_it():
  """At the paper's 125,000 steps: its 3,125 warmup steps, and an evaluation and a checkpoint every 5,000. A shorter
  run keeps those proportions unless a field is set itself; a config that sets them keeps its own."""
  paper = parsed('--config=configs/base.py').train
  assert (paper.num_steps, paper.warmup_steps, paper.eval_every, paper.checkpoint_every) == (125_000, 3125, 5000, 5000)
  short = parsed('--config=configs/base.py', '--config.train.num_steps=1000', '--config.train.eval_every=100').train
  assert (short.warmup_steps, short.eval_every, short.checkpoint_every) == (25, 100, 40)
  tiny_run = parsed('--config=configs/base.py', '--config.train.num_steps=10').train  # intervals stay at least 1
  assert (tiny_run.warmup_steps, tiny_run.eval_every, tiny_run.checkpoint_every) == (0, 1, 1)
  assert parsed('--config=configs/tiny.py', '--config.train.num_steps=300').train.warmup_steps == 100
  # The recipe's fine-tuning: one override shortens it (it used to take four, and refused 200 below its warmup).
  recipe = parsed('--config=configs/finetune/wiki_books_cpu_hour.py:sst2', '--config.train.num_steps=200').train
  assert (recipe.warmup_steps, recipe.checkpoint_every, recipe.log_every) == (20, 50, 50)
  assert parsed('--config=configs/finetune/wiki_books_cpu_hour.py:mrpc').train.warmup_steps == 80  # 800 steps
