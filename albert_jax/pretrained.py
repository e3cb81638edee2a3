"""A checkpoint as the starting point of a run (`config.init`): the model's shape, its parameters and the
vocabulary that came with it, checked against the run's config. Fine-tuning (finetune.py) and continued pretraining
(train.py) start from one the same way.

`config.init` names anything `from_pretrained` reads: a pretraining workdir (its best checkpoint by held-out MLM
accuracy, or `config.init_step`), a checkpoint of ours, an HF directory (AlbertForPreTraining, AlbertForMaskedLM,
a downstream class), an original TF checkpoint; local or gs://. 'none' (or unset) is random weights.
"""
import dataclasses
import functools
from typing import Callable, Optional

import jax
import ml_collections
import numpy as np

from albert_jax import interop, paths
from albert_jax.config import defaults
from albert_jax.data import vocab as vocab_lib
from albert_jax.data.tokenizer import Tokenizer
from albert_jax.errors import ConfigError
from albert_jax.model import RUNTIME_FIELDS, ModelConfig


@dataclasses.dataclass
class Start:
  model: ModelConfig  # the checkpoint's shape with the run's runtime fields (dropout, dtype, remat, ...)
  vocab: Optional[str]  # the vocabulary that came with the checkpoint, if any
  description: str  # what was loaded, for the console
  init: Optional[str] = None  # the checkpoint (config.init); None: random weights
  read: Optional[Callable[[], dict]] = None  # its parameters (numpy), however load() got them

  @functools.cached_property
  def params(self) -> Optional[dict]:
    """The checkpoint's parameters, read when first asked for; None: random weights."""
    return self.read() if self.read else None


def given(config) -> bool:
  return config.get('init') not in (None, 'none')


def load(config, read_weights: bool = True) -> Start:
  """The starting point `config.init` names; random weights of config.model's shape where it names none. Without
  `read_weights`, the parameters are read when start.params is first asked for (never, by a resumed run)."""
  if not given(config):
    return Start(ModelConfig.from_config(config.model), None, 'random weights')
  if read_weights:  # the checkpoint read once, whole: one that cannot be read stops the run before it starts
    loaded, params, description = interop.read(config.init, config.get('init_step'))
    read = lambda: params
  else:  # its shape and vocabulary; the weights of the very checkpoint chosen, if ever asked for
    loaded, description, step = interop.read_config(config.init, config.get('init_step'))
    read = lambda: interop.read(config.init, step)[1]
  model = dataclasses.replace(ModelConfig.from_config(loaded.model), **{k: config.model[k] for k in RUNTIME_FIELDS})
  return Start(model, vocabulary(config.init, loaded), description, str(config.init), read)


def vocabulary(init: str, loaded: ml_collections.ConfigDict) -> Optional[str]:
  """The vocabulary that came with `init`: a pretraining run's (the built-in one as that run trained it), our
  export's data.vocab, or the spiece.model / 30k-clean.model that HF and the original releases ship beside it."""
  fmt = interop.detect_format(init)
  if fmt == 'workdir' and loaded.data.vocab == 'builtin':
    return str(vocab_lib.builtin_vocab_path(loaded.data.tfds_data_dir, loaded.model.vocab_size))
  if fmt in ('workdir', 'albert_jax'):
    return loaded.data.vocab
  path = paths.path(init)
  return next((str(f) for f in (path / 'spiece.model', path.parent / '30k-clean.model') if f.exists()), None)


def tokenizer(config, start: Start) -> Tokenizer:
  """The run's vocabulary: config.data.vocab, else the one that came with the checkpoint. Refused: none at all, a
  size that is not the model's, and a data.vocab whose pieces are not those of the checkpoint's vocabulary."""
  if not given(config):
    return vocab_lib.load_tokenizer(config.data.vocab, start.model.vocab_size, config.data.get('tfds_data_dir'))
  path = config.data.vocab or start.vocab
  if path is None:
    raise ConfigError(f'no vocabulary came with config.init {config.init}: set --config.data.vocab to the '
                      f'SentencePiece .model it was pretrained with.')
  # The built-in vocabulary is trained on first use; a size that differs from the model's stops here.
  chosen = vocab_lib.load_tokenizer(path, start.model.vocab_size, config.data.get('tfds_data_dir'))
  if config.data.vocab and start.vocab and config.data.vocab != start.vocab and _pieces(chosen) != _pieces(
      vocab_lib.load_tokenizer(start.vocab, start.model.vocab_size, config.data.get('tfds_data_dir'))):
    raise ConfigError(f'config.data.vocab {config.data.vocab} is not the vocabulary {config.init} was trained with '
                      f'({start.vocab}): their pieces differ. Leave data.vocab unset to use the checkpoint\'s.')
  return chosen


def _pieces(vocab: Tokenizer) -> list:
  return [vocab.sp.id_to_piece(i) for i in range(vocab.sp.get_piece_size())]


def for_pretraining(config: ml_collections.ConfigDict, read_weights: bool = False) -> tuple:
  """(the run's config, Start) for continued pretraining from config.init: the config's model becomes the
  checkpoint's shape, its data.vocab the checkpoint's vocabulary where it names none. A model field the config sets
  (one that differs from the schema's default) to another value than the checkpoint's is refused, naming both. The
  weights are read with `read_weights`, else when start.params is first asked for."""
  start = load(config, read_weights)
  if start.init is None:
    return config, start
  default = defaults().model
  contradictions = [f'model.{name} is {config.model[name]!r} in the config, {value!r} in the checkpoint'
                    for name, value in dataclasses.asdict(start.model).items()
                    if name not in RUNTIME_FIELDS and name in config.model and config.model[name] != default.get(name)
                    and config.model[name] != value]
  if contradictions:
    raise ConfigError(f'config.init {config.init} contradicts the config: {"; ".join(contradictions)}. The model\'s '
                      f'shape comes from the checkpoint: drop those settings (or use a config that leaves them at '
                      f'their defaults).')
  config = ml_collections.ConfigDict(config.to_dict())  # unlocked: the model actually trained is recorded
  config.model = ml_collections.ConfigDict(dataclasses.asdict(start.model))
  config.data.vocab = config.data.vocab or start.vocab
  return config, start


def place(tree, shardings):
  """Host numpy arrays (the same on every host) as global arrays with `shardings`."""
  return jax.tree.map(lambda x, s: jax.make_array_from_callback(x.shape, s, lambda index: np.asarray(x)[index]),
                      tree, shardings)


def into_state(state: dict, params: dict, shardings: dict, parts) -> dict:
  """`state` with its parameters of `parts` replaced by the checkpoint's (those it has), placed as `shardings`."""
  new = dict(state['params'])
  for part in [p for p in parts if p in params and p in new]:
    new[part] = place(params[part], shardings['params'][part])
  return {**state, 'params': new}
