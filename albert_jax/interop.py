"""Checkpoints in and out: ours (orbax), HuggingFace `AlbertForPreTraining` directories, original TF ALBERT.

`from_pretrained(path)` tells the format from what is there, on a disk or in a bucket (gs://): a pretraining
workdir (its best checkpoint, or a given step), our export, HF, original TF. Each external format is one name table
below; tensors move as they are, torch's [out, in] Linear weights transposed.

Grouped models (num_groups x inner_group_num distinct blocks) map to our stacked copies, copy g*K + k.
A model of ours whose sharing HF and TF cannot express directly (sharing='attention', 'ffn', 'none') is exported
as num_layers groups with the shared parts repeated: the same function, more stored values.
"""
import dataclasses
import functools
import io
import json
import warnings
from typing import Callable, Optional

import flax.linen as nn
import jax
import ml_collections
import numpy as np

from albert_jax import checkpoint, paths, sharding
from albert_jax import step as step_lib
from albert_jax.config import defaults, validate
from albert_jax.downstream import heads
from albert_jax.errors import CheckpointError
from albert_jax.model import LAYER_NORM_EPS, Albert, ModelConfig, abstract_params, init_params

OURS_CONFIG = 'albert_jax.json'
OURS_PARAMS = 'params'
TF_CONFIG = 'albert_config.json'


@dataclasses.dataclass(frozen=True)
class Entry:
  """One tensor: its external name, its path in our tree, and whether the external one is stored [out, in]
  (torch Linear, TF's seq_relationship/output_weights) while ours is [in, out] like every TF kernel."""
  name: str
  path: tuple
  transpose: bool = False


BACKBONE = ('embeddings', 'encoder', 'pooler')  # what every model has; the rest is its head
# Parts a pretraining checkpoint may lack as a whole: read without them (from_pretrained makes them anew).
OPTIONAL_PARTS = ('pooler', 'sop_head')
# HF's downstream heads (our path, HF name, HF stores it [out, in]); the models are in downstream/heads.py.
_CLASSIFIER = [(('classifier', 'kernel'), 'classifier.weight', True), (('classifier', 'bias'), 'classifier.bias', False)]
_HF_HEADS = {
    'AlbertForSequenceClassification': _CLASSIFIER,
    'AlbertForMultipleChoice': _CLASSIFIER,
    'AlbertForQuestionAnswering': [(('qa_outputs', 'kernel'), 'qa_outputs.weight', True),
                                   (('qa_outputs', 'bias'), 'qa_outputs.bias', False)],
}

# Every tensor outside the blocks: (our path, HF name, TF name, HF stores it [out, in], TF stores it [out, in]).
_TOP = [
    (('embeddings', 'word_embeddings'), 'albert.embeddings.word_embeddings.weight',
     'bert/embeddings/word_embeddings', False, False),
    (('embeddings', 'position_embeddings'), 'albert.embeddings.position_embeddings.weight',
     'bert/embeddings/position_embeddings', False, False),
    (('embeddings', 'token_type_embeddings'), 'albert.embeddings.token_type_embeddings.weight',
     'bert/embeddings/token_type_embeddings', False, False),
    (('embeddings', 'layer_norm', 'scale'), 'albert.embeddings.LayerNorm.weight', 'bert/embeddings/LayerNorm/gamma',
     False, False),
    (('embeddings', 'layer_norm', 'bias'), 'albert.embeddings.LayerNorm.bias', 'bert/embeddings/LayerNorm/beta',
     False, False),
    (('pooler', 'kernel'), 'albert.pooler.weight', 'bert/pooler/dense/kernel', True, False),
    (('pooler', 'bias'), 'albert.pooler.bias', 'bert/pooler/dense/bias', False, False),
    (('mlm_head', 'transform', 'kernel'), 'predictions.dense.weight', 'cls/predictions/transform/dense/kernel',
     True, False),
    (('mlm_head', 'transform', 'bias'), 'predictions.dense.bias', 'cls/predictions/transform/dense/bias', False,
     False),
    (('mlm_head', 'layer_norm', 'scale'), 'predictions.LayerNorm.weight', 'cls/predictions/transform/LayerNorm/gamma',
     False, False),
    (('mlm_head', 'layer_norm', 'bias'), 'predictions.LayerNorm.bias', 'cls/predictions/transform/LayerNorm/beta',
     False, False),
    (('mlm_head', 'output_bias'), 'predictions.bias', 'cls/predictions/output_bias', False, False),
    # TF stores this one [2, H] (out, in), unlike every other TF kernel.
    (('sop_head', 'kernel'), 'sop_classifier.classifier.weight', 'cls/seq_relationship/output_weights', True, True),
    (('sop_head', 'bias'), 'sop_classifier.classifier.bias', 'cls/seq_relationship/output_bias', False, False),
]
_PROJECTION = [
    (('encoder', 'embedding_projection', 'kernel'), 'albert.encoder.embedding_hidden_mapping_in.weight',
     'bert/encoder/embedding_hidden_mapping_in/kernel', True, False),
    (('encoder', 'embedding_projection', 'bias'), 'albert.encoder.embedding_hidden_mapping_in.bias',
     'bert/encoder/embedding_hidden_mapping_in/bias', False, False),
]
# Parts of one block, as (our path under the block, HF suffix, TF suffix, is a kernel: HF stores it [out, in]).
_BLOCK = [
    (('attention', 'query', 'kernel'), 'attention.query.weight', 'attention_1/self/query/kernel', True),
    (('attention', 'query', 'bias'), 'attention.query.bias', 'attention_1/self/query/bias', False),
    (('attention', 'key', 'kernel'), 'attention.key.weight', 'attention_1/self/key/kernel', True),
    (('attention', 'key', 'bias'), 'attention.key.bias', 'attention_1/self/key/bias', False),
    (('attention', 'value', 'kernel'), 'attention.value.weight', 'attention_1/self/value/kernel', True),
    (('attention', 'value', 'bias'), 'attention.value.bias', 'attention_1/self/value/bias', False),
    (('attention', 'output', 'kernel'), 'attention.dense.weight', 'attention_1/output/dense/kernel', True),
    (('attention', 'output', 'bias'), 'attention.dense.bias', 'attention_1/output/dense/bias', False),
    (('attention', 'layer_norm', 'scale'), 'attention.LayerNorm.weight', 'LayerNorm/gamma', False),
    (('attention', 'layer_norm', 'bias'), 'attention.LayerNorm.bias', 'LayerNorm/beta', False),
    (('ffn', 'intermediate', 'kernel'), 'ffn.weight', 'ffn_1/intermediate/dense/kernel', True),
    (('ffn', 'intermediate', 'bias'), 'ffn.bias', 'ffn_1/intermediate/dense/bias', False),
    (('ffn', 'output', 'kernel'), 'ffn_output.weight', 'ffn_1/intermediate/output/dense/kernel', True),
    (('ffn', 'output', 'bias'), 'ffn_output.bias', 'ffn_1/intermediate/output/dense/bias', False),
    (('ffn', 'layer_norm', 'scale'), 'full_layer_layer_norm.weight', 'LayerNorm_1/gamma', False),
    (('ffn', 'layer_norm', 'bias'), 'full_layer_layer_norm.bias', 'LayerNorm_1/beta', False),
]


def _entries(fmt: str, num_groups: int, inner: int, projection: bool, head: Optional[str] = None) -> list:
  """The tensors of format `fmt` ('hf' or 'tf') for a model with num_groups x inner distinct blocks: the
  pretraining heads, or (HF only) the downstream head of architecture `head` in their place."""
  hf = fmt == 'hf'
  top = [row for row in _TOP if head is None or row[0][0] in BACKBONE and not (
      row[0][0] == 'pooler' and head == 'AlbertForQuestionAnswering')]
  entries = [Entry(hf_name if hf else tf_name, path, hf_t if hf else tf_t)
             for path, hf_name, tf_name, hf_t, tf_t in top + (_PROJECTION if projection else [])]
  if head is not None:
    entries += [Entry(name, path, transpose) for path, name, transpose in _HF_HEADS[head]]
  for g in range(num_groups):
    for k in range(inner):
      for path, hf_suffix, tf_suffix, kernel in _BLOCK:
        name = (f'albert.encoder.albert_layer_groups.{g}.albert_layers.{k}.{hf_suffix}' if hf else
                f'bert/encoder/transformer/group_{g}/inner_group_{k}/{tf_suffix}')
        entries.append(Entry(name, ('block', g * inner + k) + path, transpose=hf and kernel))
  return entries


_hf_entries = functools.partial(_entries, 'hf')
_tf_entries = functools.partial(_entries, 'tf')


# ---------------------------------------------------------------------------------------------------------------
# Our tree <-> a flat list of per-block trees (what HF and TF store as groups x inner layers).

def _get(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def _set(tree, path, value):
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def _export_layout(cfg: ModelConfig):
  """(num_groups, inner_group_num) of the exported model: ours when sharing='all', else one group per layer."""
  return (cfg.num_groups, cfg.inner_group_num) if cfg.sharing == 'all' else (cfg.num_layers, cfg.inner_group_num)


def _blocks_of(params, cfg: ModelConfig) -> list:
  """The distinct blocks as the export layout orders them: block j = group j // K, inner layer j % K."""
  groups, inner = _export_layout(cfg)
  stored = params['encoder']['block']
  blocks = []
  for j in range(groups * inner):
    # The first layer of group g runs blocks (g * L // G) * K + k.
    first_block = (j // inner) * cfg.num_layers // groups * inner + j % inner
    block = {}
    for part, copies in (('attention', cfg.attention_copies), ('ffn', cfg.ffn_copies)):
      copy = cfg.block_copy(first_block, copies)
      pick = (lambda x, c=copy: np.asarray(x[c])) if copies > 1 else np.asarray
      block[part] = jax.tree.map(pick, stored[part])
    blocks.append(block)
  return blocks


def _to_external(params, cfg: ModelConfig, entries_fn: Callable, head: Optional[str] = None) -> dict:
  groups, inner = _export_layout(cfg)
  projection = 'embedding_projection' in params['encoder']
  tree = {k: v for k, v in params.items() if k != 'encoder'}
  tree['block'] = _blocks_of(params, cfg)
  if projection:
    tree['encoder'] = {'embedding_projection': params['encoder']['embedding_projection']}
  out = {}
  for e in entries_fn(groups, inner, projection, head):
    x = np.asarray(_get(tree, e.path), np.float32)
    out[e.name] = np.ascontiguousarray(x.T if e.transpose else x)
  return out


def _from_external(tensors: dict, cfg: ModelConfig, entries_fn: Callable, source: str,
                   head: Optional[dict] = None) -> dict:
  """Our params (numpy) from external tensors, checked against the shapes the config implies."""
  target = _unboxed_shapes(heads.make_model(cfg, head))
  projection = cfg.embedding_size != cfg.hidden_size or cfg.embedding_projection
  entries = entries_fn(cfg.num_groups, cfg.inner_group_num, projection, head and head['architecture'])
  if head is None:  # a pretraining model without its pooler or SOP head (HF's AlbertForMaskedLM has neither)
    absent = [part for part in OPTIONAL_PARTS if not any(e.name in tensors for e in entries if e.path[0] == part)]
    entries = [e for e in entries if e.path[0] not in absent]
  missing = [e.name for e in entries if e.name not in tensors]
  if missing:
    raise CheckpointError(f'{source} lacks {len(missing)} tensors the config implies, e.g. {missing[:3]}; '
                          f'the checkpoint is truncated or its config does not describe it.')
  copies = cfg.num_groups * cfg.inner_group_num
  params, stacks = {}, {}
  for e in entries:
    x = np.asarray(tensors[e.name], np.float32)
    stacked_part = e.path[0] == 'block' and copies > 1
    our_path = ('encoder', 'block') + e.path[2:] if e.path[0] == 'block' else e.path
    shape = _get(target, our_path).shape[1 if stacked_part else 0:]
    if e.transpose:
      x = x.T
    if x.shape != shape:
      raise CheckpointError(f'{source}: {e.name} has shape {x.shape}, but the config implies {shape}; '
                            f'the config does not describe this checkpoint.')
    if stacked_part:
      if our_path not in stacks:
        stacks[our_path] = np.zeros((copies,) + shape, np.float32)
      stacks[our_path][e.path[1]] = x
    else:
      _set(params, our_path, x)
  for our_path, stacked in stacks.items():
    _set(params, our_path, stacked)
  return params


def _unboxed_shapes(model: nn.Module):
  if isinstance(model, Albert):
    return nn.unbox(abstract_params(model))
  length = min(8, model.config.max_position_embeddings)
  ids = jax.ShapeDtypeStruct((1, 2, length) if isinstance(model, heads.MultipleChoice) else (1, length), np.int32)
  return nn.unbox(jax.eval_shape(lambda i: model.init(jax.random.key(0), i)['params'], ids))


def full_config(model: ModelConfig) -> ml_collections.ConfigDict:
  config = defaults()
  config.model.update(dataclasses.asdict(model))
  # An imported model may have a shorter position table than the paper's 512.
  config.data.max_seq_length = min(config.data.max_seq_length, model.max_position_embeddings)
  return config


# ---------------------------------------------------------------------------------------------------------------
# HuggingFace.

_HF_ACT_TO_OURS = {'gelu_new': 'gelu', 'gelu_pytorch_tanh': 'gelu', 'gelu_fast': 'gelu', 'gelu': 'gelu_exact',
                   'relu': 'relu', 'tanh': 'tanh', 'linear': 'linear'}
_OURS_ACT_TO_HF = {'gelu': 'gelu_new', 'gelu_exact': 'gelu', 'relu': 'relu', 'tanh': 'tanh', 'linear': 'linear'}


_SHAPE_FIELDS = ('vocab_size', 'embedding_size', 'hidden_size', 'num_hidden_layers', 'num_attention_heads',
                 'intermediate_size')


def _model_config_from_json(c: dict, act_map: dict, source: str) -> ModelConfig:
  missing = [name for name in _SHAPE_FIELDS if name not in c]
  if missing:  # HF's save_pretrained and the original's release write them all
    raise CheckpointError(f'{source} lacks {", ".join(missing)}: not a whole ALBERT config (the model\'s shape needs '
                          f'{", ".join(_SHAPE_FIELDS)}); add {"them" if len(missing) > 1 else "it"}, or save the '
                          f'model again with save_pretrained.')
  act = c.get('hidden_act', 'gelu_new' if act_map is _HF_ACT_TO_OURS else 'gelu')
  if act not in act_map:
    raise CheckpointError(f'{source}: hidden_act {act!r} is not supported; known: {", ".join(act_map)}.')
  eps = c.get('layer_norm_eps', LAYER_NORM_EPS)
  if abs(eps - LAYER_NORM_EPS) > 1e-15:
    raise CheckpointError(f'{source}: layer_norm_eps {eps} differs from the original ALBERT\'s {LAYER_NORM_EPS}, '
                          f'which albert_jax uses everywhere.')
  return ModelConfig(
      vocab_size=c['vocab_size'], embedding_size=c['embedding_size'], hidden_size=c['hidden_size'],
      num_layers=c['num_hidden_layers'], num_heads=c['num_attention_heads'],
      intermediate_size=c['intermediate_size'], hidden_act=act_map[act],
      dropout_rate=float(c.get('hidden_dropout_prob', 0.0)),
      attention_dropout_rate=float(c.get('attention_probs_dropout_prob', 0.0)),
      max_position_embeddings=c.get('max_position_embeddings', 512), type_vocab_size=c.get('type_vocab_size', 2),
      initializer_range=c.get('initializer_range', 0.02), sharing='all',
      num_groups=c.get('num_hidden_groups', 1), inner_group_num=c.get('inner_group_num', 1))


def _config_json(cfg: ModelConfig, act_map: dict) -> dict:
  groups, inner = _export_layout(cfg)
  return {'vocab_size': cfg.vocab_size, 'embedding_size': cfg.embedding_size, 'hidden_size': cfg.hidden_size,
          'num_hidden_layers': cfg.num_layers, 'num_hidden_groups': groups, 'inner_group_num': inner,
          'num_attention_heads': cfg.num_heads, 'intermediate_size': cfg.intermediate_size,
          'hidden_act': act_map[cfg.hidden_act], 'hidden_dropout_prob': cfg.dropout_rate,
          'attention_probs_dropout_prob': cfg.attention_dropout_rate,
          'max_position_embeddings': cfg.max_position_embeddings, 'type_vocab_size': cfg.type_vocab_size,
          'initializer_range': cfg.initializer_range}


def hf_state_dict(params, cfg: ModelConfig, head: Optional[dict] = None) -> dict:
  """HF tensors (numpy, torch layouts) from our params: `AlbertForPreTraining`'s, or those of the HF class
  head['architecture']."""
  tensors = _to_external(params, cfg, _hf_entries, head and head['architecture'])
  if 'embedding_projection' not in params['encoder']:
    # HF always has the E -> H mapping; the original (and we) have none when E == H: export the identity.
    tensors['albert.encoder.embedding_hidden_mapping_in.weight'] = np.eye(cfg.hidden_size, dtype=np.float32)
    tensors['albert.encoder.embedding_hidden_mapping_in.bias'] = np.zeros(cfg.hidden_size, np.float32)
  return tensors


def save_hf(directory, params, cfg: ModelConfig, head: Optional[dict] = None, tokenizer=None) -> None:
  """Writes config.json and model.safetensors that `AlbertForPreTraining.from_pretrained` loads, or (with a
  `head`, see make_model) the HF downstream class it names; with `tokenizer` (a data.tokenizer.Tokenizer, e.g. from
  tokenizer_of) its vocabulary and settings."""
  from safetensors.numpy import save
  directory = paths.path(directory)
  architecture = head['architecture'] if head else 'AlbertForPreTraining'
  if head and architecture not in _HF_HEADS:
    raise CheckpointError(f'{architecture} has no HuggingFace class (HF scores SQuAD 2.0 with the v1 head, '
                          f'AlbertForQuestionAnswering); keep it in the albert_jax format.')
  directory.mkdir(parents=True, exist_ok=True)
  hf_config = {'architectures': [architecture], 'model_type': 'albert', **_config_json(cfg, _OURS_ACT_TO_HF),
               'layer_norm_eps': LAYER_NORM_EPS, 'classifier_dropout_prob': (head or {}).get('classifier_dropout', 0.1),
               'pad_token_id': 0, 'bos_token_id': 2, 'eos_token_id': 3, 'tie_word_embeddings': True}
  if architecture == 'AlbertForSequenceClassification':
    labels = head.get('labels') or [str(i) for i in range(head['num_labels'])]
    hf_config.update(id2label={str(i): label for i, label in enumerate(labels)},
                     label2id={label: i for i, label in enumerate(labels)},
                     problem_type='regression' if head['num_labels'] == 1 else 'single_label_classification')
  (directory / 'model.safetensors').write_bytes(save(hf_state_dict(params, cfg, head), metadata={'format': 'pt'}))
  (directory / 'config.json').write_text(json.dumps(hf_config, indent=2) + '\n')
  if tokenizer:
    save_hf_tokenizer(directory, tokenizer, cfg)


def save_hf_tokenizer(directory, tokenizer, cfg: ModelConfig) -> None:
  """The vocabulary as HF's own ALBERT releases carry it: spiece.model and the tokenizer's settings (lowercased,
  accents stripped, as the original's preprocessing and ours), so that AutoTokenizer and pipeline('fill-mask')
  work on the directory as written."""
  if tokenizer.vocab_size != cfg.vocab_size:  # Tokenizer checked its control symbols when it loaded
    raise CheckpointError(f'{tokenizer.path} has {tokenizer.vocab_size} pieces but the model {cfg.vocab_size}: '
                          f'give the vocabulary the model was trained with.')
  directory = paths.path(directory)
  (directory / 'spiece.model').write_bytes(tokenizer.sp.serialized_model_proto())
  special = {'bos_token': '[CLS]', 'eos_token': '[SEP]', 'unk_token': '<unk>', 'sep_token': '[SEP]',
             'pad_token': '<pad>', 'cls_token': '[CLS]',
             # "[MASK]" also takes the space before it, as in HF's albert-base-v2.
             'mask_token': {'content': '[MASK]', 'lstrip': True, 'rstrip': False, 'normalized': False,
                            'single_word': False}}
  settings = {'tokenizer_class': 'AlbertTokenizer', 'do_lower_case': tokenizer.lower, 'remove_space': True,
              'keep_accents': False, 'model_max_length': cfg.max_position_embeddings, **special}
  (directory / 'tokenizer_config.json').write_text(json.dumps(settings, indent=2) + '\n')
  (directory / 'special_tokens_map.json').write_text(json.dumps(special, indent=2) + '\n')


def _read_hf_tensors(directory: paths.Path) -> dict:
  if (directory / 'model.safetensors').exists():
    return _safetensors(directory / 'model.safetensors')
  if (directory / 'model.safetensors.index.json').exists():
    files = sorted(set(json.loads((directory / 'model.safetensors.index.json').read_text())['weight_map'].values()))
    return {k: v for f in files for k, v in _safetensors(directory / f).items()}
  try:
    import torch
  except ImportError as e:
    raise CheckpointError(f'{directory}/pytorch_model.bin needs torch to read: pip install "albert_jax[hf]", '
                          f'or convert the directory to safetensors.') from e
  try:
    state = torch.load(io.BytesIO((directory / 'pytorch_model.bin').read_bytes()), map_location='cpu',
                       weights_only=True)
  except Exception as e:  # torch raises several types for a damaged zip/pickle
    raise CheckpointError(f'{directory}/pytorch_model.bin cannot be read ({e}); it is truncated or corrupt.') from e
  return {k: v.float().numpy() for k, v in state.items()}


def _safetensors(path: paths.Path) -> dict:
  from safetensors.numpy import load
  try:
    return load(path.read_bytes())
  except Exception as e:  # safetensors raises SafetensorError for a truncated header or body
    raise CheckpointError(f'{path} cannot be read ({e}); it is truncated or corrupt: download or export it '
                          f'again.') from e


def load_hf(directory) -> tuple:
  """(model config, params, head or None) of an HF ALBERT directory: AlbertForPreTraining (or AlbertModel,
  AlbertForMaskedLM: what they have), or a downstream class of _HF_HEADS."""
  directory = paths.path(directory)
  cfg, head = _hf_model_config(directory)
  tensors = _read_hf_tensors(directory)
  tensors = {k[len('module.'):] if k.startswith('module.') else k: v for k, v in tensors.items()}
  if cfg.embedding_size == cfg.hidden_size:
    # HF keeps an E -> H mapping even when E == H (the original has none): keep it unless it is the identity.
    w = tensors.get('albert.encoder.embedding_hidden_mapping_in.weight')
    b = tensors.get('albert.encoder.embedding_hidden_mapping_in.bias')
    if w is not None and not (np.array_equal(w, np.eye(cfg.hidden_size)) and not np.any(b)):
      cfg = dataclasses.replace(cfg, embedding_projection=True)
  return cfg, _from_external(tensors, cfg, _hf_entries, str(directory), head), head


def _hf_model_config(directory: paths.Path) -> tuple:
  """(model config, head or None) from an HF directory's config.json (E = H: without the E -> H mapping, which
  only its tensors tell)."""
  hf_config = json.loads((directory / 'config.json').read_text())
  if hf_config.get('model_type') != 'albert':
    raise CheckpointError(f'{directory}/config.json has model_type {hf_config.get("model_type")!r}, not "albert".')
  cfg = _model_config_from_json(hf_config, _HF_ACT_TO_OURS, f'{directory}/config.json')
  architecture = (hf_config.get('architectures') or ['AlbertForPreTraining'])[0]
  head = None
  if architecture in _HF_HEADS:
    labels = [label for _, label in sorted(hf_config.get('id2label', {}).items(), key=lambda kv: int(kv[0]))]
    head = {'architecture': architecture, 'classifier_dropout': float(hf_config.get('classifier_dropout_prob', 0.1)),
            'num_labels': len(labels) or hf_config.get('num_labels', 2), 'labels': labels}
  return cfg, head


# ---------------------------------------------------------------------------------------------------------------
# Original TF ALBERT (TF1 name-based checkpoints plus albert_config.json).

def import_tensorflow(what: str):
  """TensorFlow, which reads and writes the original TF checkpoint format; without it (it is optional: the `tf`
  extra) a CheckpointError says how to get it."""
  try:
    import tensorflow as tf
  except ImportError:
    raise CheckpointError(f"{what}: the original TF checkpoint format needs TensorFlow, which is not installed: "
                          f"pip install -e '.[tf]' (or convert it to the HF or albert_jax format on a machine that "
                          f"has TensorFlow).") from None
  return tf


def _tf_prefix(tf, path: paths.Path) -> Optional[paths.Path]:
  """The checkpoint prefix for a prefix path, or for a directory holding one (newest by TF's `checkpoint` file)."""
  if paths.path(f'{path}.index').exists():
    return path
  if path.is_dir():
    latest = tf.train.latest_checkpoint(str(path))
    if latest:
      return paths.path(latest)
    indexes = sorted(str(index) for index in path.glob('*.index'))
    if indexes:
      return paths.path(indexes[-1][:-len('.index')])
  return None


def load_tf(path) -> tuple:
  """An original checkpoint: a prefix (model.ckpt-N) or the folder holding it, with albert_config.json there. In a
  bucket, TensorFlow reads a local copy of that folder: its own Cloud Storage client is not the one albert_jax
  sets up (and cannot be pointed at another endpoint)."""
  tf = import_tensorflow(str(path))
  path = paths.path(path)
  cfg, folder = _tf_model_config(path)
  with paths.local_copy(folder) as local:
    local = paths.path(local)
    prefix = _tf_prefix(tf, local if path == folder else local / path.name)
    if prefix is None:
      raise CheckpointError(f'{path}: no TF checkpoint there (model.ckpt-N.index and .data-* files).')
    source = str(folder / prefix.name)  # the user's name for it, not the local copy's
    try:
      reader = tf.train.load_checkpoint(str(prefix))
      names = [n for n in reader.get_variable_to_shape_map()
               if not n.endswith(('adam_m', 'adam_v', 'lamb_m', 'lamb_v')) and n != 'global_step']
      tensors = {n[len('module/'):] if n.startswith('module/') else n: reader.get_tensor(n) for n in names}
    except (tf.errors.OpError, ValueError) as e:
      raise CheckpointError(f'TF checkpoint {source} cannot be read ({e}); it is truncated or corrupt.') from e
  return cfg, _from_external(tensors, cfg, _tf_entries, source), None


def _tf_model_config(path: paths.Path) -> tuple:
  """(model config, the folder) from the albert_config.json beside an original checkpoint: no TensorFlow needed."""
  folder = path if path.is_dir() else path.parent
  config_file = folder / TF_CONFIG
  if not config_file.exists():
    raise CheckpointError(f'{config_file} is missing: an original ALBERT checkpoint needs its albert_config.json '
                          f'beside it (it ships in the release tarball).')
  return _model_config_from_json(json.loads(config_file.read_text()), {a: a for a in _OURS_ACT_TO_HF},
                                 str(config_file)), folder


def save_tf(directory, params, cfg: ModelConfig) -> None:
  """Writes an original-format TF1 checkpoint (model.ckpt) and albert_config.json that the original code loads;
  for a bucket, into a local folder first (TensorFlow's Cloud Storage client is not albert_jax's)."""
  tf = import_tensorflow(str(directory))
  tensors = _to_external(params, cfg, _tf_entries)
  with paths.writable_locally(directory) as local:
    local = paths.path(local)
    with tf.Graph().as_default():
      variables = [tf.compat.v1.get_variable(name, initializer=value) for name, value in tensors.items()]
      saver = tf.compat.v1.train.Saver(variables)
      with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        saver.save(session, str(local / 'model.ckpt'), write_meta_graph=False)
    (local / TF_CONFIG).write_text(json.dumps(_config_json(cfg, {a: a for a in _OURS_ACT_TO_HF}), indent=2) + '\n')


# ---------------------------------------------------------------------------------------------------------------
# Ours: the full config as JSON plus the parameters as an orbax checkpoint.

def save(directory, params, config: ml_collections.ConfigDict) -> None:
  import orbax.checkpoint as ocp
  directory = paths.path(directory)
  validate(config)
  directory.mkdir(parents=True, exist_ok=True)
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(directory / OURS_PARAMS, jax.tree.map(np.asarray, params), force=True)
  # Written last: a directory with the JSON has complete parameters.
  (directory / OURS_CONFIG).write_text(config.to_json_best_effort(indent=2) + '\n')


def load(directory) -> tuple:
  import orbax.checkpoint as ocp
  directory = paths.path(directory)
  config = _ours_config(directory)
  cfg = validate(config)
  target = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype),
                        _unboxed_shapes(heads.make_model(cfg, config.get('head'))))
  checkpoint.quiet_abandoned_reads()
  try:
    with ocp.StandardCheckpointer() as checkpointer:
      params = checkpointer.restore(directory / OURS_PARAMS, target)
  except Exception as e:  # orbax/tensorstore raise many types for missing or damaged files
    raise CheckpointError(f'{directory / OURS_PARAMS} cannot be restored ({checkpoint.damage(e)}); it is '
                          f'incomplete or does not match {OURS_CONFIG}.') from e
  return config, params


def _ours_config(directory: paths.Path) -> ml_collections.ConfigDict:
  config = defaults()  # fields added since the checkpoint was written keep their defaults
  config.update(json.loads((directory / OURS_CONFIG).read_text()))
  return config


# ---------------------------------------------------------------------------------------------------------------
# A pretraining workdir (train.py's): its checkpoints, read where they are, while the run may still be writing.

def is_workdir(path) -> bool:
  """A workdir of train.py (or finetune.py): its config.json beside checkpoints/."""
  path = paths.path(path)
  return (path / 'checkpoints').is_dir() and (path / 'config.json').exists()


def load_workdir(workdir, step: Optional[int] = None) -> tuple:
  """(config, params, step, that checkpoint's saved metrics or None) of a pretraining workdir: checkpoint `step`,
  by default the best by held-out MLM accuracy (orbax's best: the latest among equals), or the newest where no
  checkpoint has a metric (runs from before metrics were saved with checkpoints)."""
  config, step, metrics = _workdir_checkpoint(workdir, step)
  mesh = sharding.make_mesh(ml_collections.ConfigDict({'data': 1, 'fsdp': 1, 'model': 1}), jax.local_devices()[:1])
  # Only to restore its parameters, which any attention implementation reads alike.
  program = step_lib.build(config, dataclasses.replace(validate(config), attention='xla'), mesh)
  checkpoint.quiet_abandoned_reads()
  with checkpoint.manager(workdir, config.train.keep_checkpoints, read_only=True) as mngr:
    try:
      params = jax.device_get(checkpoint.restore_state(mngr, step, program.abstract_state())['params'])
    except Exception as e:  # orbax and tensorstore raise many types for damaged or missing files
      raise CheckpointError(f'checkpoint {step} of {workdir} cannot be restored ({checkpoint.damage(e)}): choose '
                            f'another of its steps (config.init_step, or --step), or wait for a newer one.') from e
  return config, params, step, metrics


def _workdir_checkpoint(workdir, step: Optional[int] = None) -> tuple:
  """(config, step, metrics) of the checkpoint load_workdir reads, its parameters left where they are."""
  workdir = paths.path(workdir)
  saved = json.loads((workdir / 'config.json').read_text())
  if 'task' in saved:
    raise CheckpointError(f'{workdir} is a fine-tuning workdir; its best model is {workdir / "best"}: use that.')
  config = defaults()  # fields added since the run began keep their defaults
  config.update(saved)
  validate(config)
  with checkpoint.manager(workdir, config.train.keep_checkpoints, read_only=True) as mngr:
    steps = sorted(mngr.all_steps())
    if not steps:
      raise CheckpointError(f'{workdir} is a pretraining workdir without a checkpoint yet: use it once training '
                            f'has saved one (every train.checkpoint_every steps).')
    if step is None:
      step = mngr.best_step() or mngr.latest_step()
    elif step not in steps:
      raise CheckpointError(f'{workdir} has no checkpoint of step {step}; its checkpoints are of steps '
                            f'{", ".join(map(str, steps))}.')
    return config, step, mngr.metrics(step)


# ---------------------------------------------------------------------------------------------------------------

def detect_format(path) -> str:
  """'workdir' (a pretraining run's), 'albert_jax', 'hf' or 'tf'."""
  path = paths.path(path)
  if is_workdir(path):
    return 'workdir'
  if (path / OURS_CONFIG).exists():
    return 'albert_jax'
  if (path / 'config.json').exists() and any(
      (path / f).exists() for f in ('model.safetensors', 'model.safetensors.index.json', 'pytorch_model.bin')):
    return 'hf'
  if paths.path(f'{path}.index').exists() or (path.is_dir() and any(path.glob('*.index'))):
    return 'tf'
  raise CheckpointError(
      f'{path}: no checkpoint found. Expected one of: a pretraining workdir (config.json + checkpoints/), an '
      f'albert_jax directory ({OURS_CONFIG} + {OURS_PARAMS}/), a HuggingFace directory (config.json + '
      f'model.safetensors or pytorch_model.bin), or an original TF checkpoint (model.ckpt-N.index/.data-* with '
      f'{TF_CONFIG}).')


def read(path, step: Optional[int] = None) -> tuple:
  """(config, params as numpy, a line saying what was read) for anything from_pretrained reads; for a pretraining
  workdir the line names the step and its held-out MLM accuracy."""
  fmt = _format(path, step)
  source = str(path)
  if fmt == 'workdir':
    config, params, step, metrics = load_workdir(path, step)
    source = _workdir_source(path, step, metrics)
  elif fmt == 'albert_jax':
    config, params = load(path)
  else:
    cfg, params, head = (load_hf if fmt == 'hf' else load_tf)(path)
    config = _with_head(full_config(cfg), head)
  return _as_read(config), jax.tree.map(np.asarray, params), source


def read_config(path, step: Optional[int] = None) -> tuple:
  """(config, the line read() gives, the step of a pretraining workdir's checkpoint or None): what read() returns
  but the parameters, which stay unread. The shape and vocabulary are all a run checks before it needs the weights,
  and a resumed run never needs them. (An HF directory whose E equals H is read whole: whether it maps E to H is in
  its tensors.)"""
  fmt = _format(path, step)
  if fmt == 'workdir':
    config, step, metrics = _workdir_checkpoint(path, step)
    return _as_read(config), _workdir_source(path, step, metrics), step
  if fmt == 'albert_jax':
    config = _ours_config(paths.path(path))
  elif fmt == 'tf':
    config = full_config(_tf_model_config(paths.path(path))[0])
  else:
    cfg, head = _hf_model_config(paths.path(path))
    config = _with_head(full_config(load_hf(path)[0] if cfg.embedding_size == cfg.hidden_size else cfg), head)
  return _as_read(config), str(path), None


def _format(path, step: Optional[int]) -> str:
  fmt = detect_format(path)
  if step is not None and fmt != 'workdir':
    raise CheckpointError(f'{path} is one checkpoint ({fmt} format): a step can be chosen only among a pretraining '
                          f'workdir\'s checkpoints; drop the step, or name the workdir.')
  return fmt


def _workdir_source(path, step: int, metrics: Optional[dict]) -> str:
  return f'{path} step {step}' + (f', held-out MLM accuracy {metrics[checkpoint.BEST_METRIC]:.4f}' if metrics else '')


def _with_head(config: ml_collections.ConfigDict, head: Optional[dict]) -> ml_collections.ConfigDict:
  if head:
    config.head = head
  return config


def _as_read(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  # Which attention a checkpoint was trained with says where it ran, not where it will: 'auto' picks for here.
  config.model.attention = 'auto'
  return config


def tokenizer_of(path, config: ml_collections.ConfigDict, vocab: Optional[str] = None):
  """The vocabulary checkpoint `path` (read as `config`) was trained with, loaded and checked against its model:
  `vocab` if given, else the directory's spiece.model (HF's releases and our HF exports), else the run's
  data.vocab (ours; 'builtin' is made if missing), else the one *.model beside an original TF checkpoint; None
  where there is none."""
  from albert_jax.data import vocab as vocab_lib
  from albert_jax.data.tokenizer import Tokenizer
  if vocab:
    return Tokenizer(vocab, vocab_size=config.model.vocab_size)
  path = paths.path(path)
  folder = path if path.is_dir() else path.parent
  if (folder / 'spiece.model').exists():
    return Tokenizer(folder / 'spiece.model', vocab_size=config.model.vocab_size)
  if config.data.get('vocab'):
    return vocab_lib.load_tokenizer(config.data.vocab, config.model.vocab_size, config.data.get('tfds_data_dir'))
  beside = sorted(folder.glob('*.model'))
  return Tokenizer(beside[0], vocab_size=config.model.vocab_size) if len(beside) == 1 else None


def from_pretrained(path, step: Optional[int] = None) -> tuple:
  """(model, params, config) from a pretraining workdir (its best checkpoint by held-out MLM accuracy, or
  checkpoint `step`), a checkpoint of ours (pretrained or fine-tuned), an HF directory (AlbertForPreTraining or a
  downstream class: ...ForSequenceClassification, ...ForQuestionAnswering, ...ForMultipleChoice) or an original TF
  ALBERT checkpoint; local or in a bucket (gs://). `model.apply({'params': params}, input_ids=...)` runs it; a
  downstream model's output holds `logits`, or `start_logits` and `end_logits`, and `config.head` describes its
  head."""
  config, params, _ = read(path, step)
  model = heads.make_model(ModelConfig.from_config(config.model), config.get('head'))
  params, fresh = complete(model, params)
  if fresh:
    warnings.warn(f'{path} has no {" and no ".join(fresh)}: those parts hold random weights (seed 0).')
  return model, params, config


def complete(model: nn.Module, params: dict, seed: int = 0) -> tuple:
  """(params with the parts of `model` they lack made from random weights, the names of those parts): a checkpoint
  without a pooler or SOP head (OPTIONAL_PARTS) still runs whole."""
  fresh = [part for part in _unboxed_shapes(model) if part not in params]
  if not fresh:
    return params, []
  made = jax.device_get(nn.unbox(init_params(model, jax.random.key(seed))))
  return {**params, **{part: made[part] for part in fresh}}, fresh
