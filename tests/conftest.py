"""Shared test setup: fake CPU devices (for later sharding tests) and the repo root on the path for configs/."""
import os
import pathlib
import sys

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')  # test workers compile for TPU topologies side by side
ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402


@pytest.fixture(scope='session')
def tfds_dir(tmp_path_factory):
  """A TFDS data dir holding the built-in corpus and its 4000-piece vocabulary, built once per test process."""
  return str(tmp_path_factory.mktemp('tensorflow_datasets'))


def load_config(relative_path: str):
  """get_config() of a config file of the repository, e.g. 'configs/tiny.py'."""
  import importlib.util
  spec = importlib.util.spec_from_file_location('config', ROOT / relative_path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


@pytest.fixture(scope='session')
def tiny_config(tfds_dir):
  config = load_config('configs/tiny.py')
  config.data.tfds_data_dir = tfds_dir
  return config


@pytest.fixture(scope='session')
def builtin_tokenizer(tiny_config):
  from albert_jax.data import pipeline
  return pipeline.load_tokenizer(tiny_config)
