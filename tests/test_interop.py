"""Checkpoint interop against the real HF reference model (transformers' AlbertForPreTraining, torch) and real
TF1 checkpoints: logits match to 1e-4 in float32, and HF -> ours -> HF is exact."""
import json
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import linen as nn

import albert_jax
from albert_jax import interop
from albert_jax.config import defaults
from albert_jax.errors import CheckpointError
from albert_jax.model import Albert, ModelConfig, init_params
from conftest import ROOT

SHAPES = {
    'plain': dict(num_hidden_layers=3),
    'grouped': dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2),
    'group_per_layer_exact_gelu': dict(num_hidden_layers=3, num_hidden_groups=3, hidden_act='gelu'),
    'inner_groups_relu': dict(num_hidden_layers=2, inner_group_num=3, hidden_act='relu'),
}


def hf_model(seed=0, **overrides):
  torch.manual_seed(seed)
  config = transformers.AlbertConfig(**{
      'vocab_size': 99, 'embedding_size': 16, 'hidden_size': 32, 'num_attention_heads': 4,
      'intermediate_size': 37, 'max_position_embeddings': 40, 'hidden_dropout_prob': 0.0,
      'attention_probs_dropout_prob': 0.0, 'classifier_dropout_prob': 0.0, **overrides})
  model = transformers.AlbertForPreTraining(config).eval()
  with torch.no_grad():  # move LayerNorms and biases off 1/0 so that a swapped tensor cannot go unnoticed
    for p in model.parameters():
      p.add_(0.05 * torch.randn_like(p))
  return model


def inputs(seed=0, batch=3, length=14):
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, 99, (batch, length))
  types = np.zeros_like(ids)
  types[:, length // 2:] = 1
  mask = np.ones_like(ids)
  mask[1, -5:] = 0
  mask[2, -1:] = 0
  return ids, types, mask


def hf_logits(model, ids, types, mask):
  with torch.no_grad():
    out = model(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types), attention_mask=torch.tensor(mask))
  return out.prediction_logits.numpy(), out.sop_logits.numpy()


def our_logits(model, params, ids, types, mask, positions=None):
  out = model.apply({'params': params}, jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask),
                    masked_lm_positions=None if positions is None else jnp.asarray(positions))
  return np.asarray(out.mlm_logits), np.asarray(out.sop_logits)


@pytest.fixture(scope='module', params=list(SHAPES))
def hf_dir(request, tmp_path_factory):
  model = hf_model(**SHAPES[request.param])
  directory = tmp_path_factory.mktemp(request.param)
  model.save_pretrained(directory)
  return model, directory


def test_logits_match_hf(hf_dir):
  hf, directory = hf_dir
  model, params, config = albert_jax.from_pretrained(directory)
  assert config.model.num_groups == hf.config.num_hidden_groups
  batch = inputs()
  hf_mlm, hf_sop = hf_logits(hf, *batch)
  mlm, sop = our_logits(model, params, *batch)
  np.testing.assert_allclose(mlm, hf_mlm, atol=1e-4, rtol=0)
  np.testing.assert_allclose(sop, hf_sop, atol=1e-4, rtol=0)
  positions = np.array([[1, 3, 0], [2, 8, 5], [12, 0, 0]])
  sparse, _ = our_logits(model, params, *batch, positions=positions)
  np.testing.assert_allclose(sparse, np.take_along_axis(hf_mlm, positions[..., None], 1), atol=1e-4, rtol=0)


def test_gradients_match_hf_autograd(hf_dir):
  """The hand-written backward passes (attention, LayerNorm, GELU) against torch's autograd of HF's model: the
  pretraining loss (MLM at labelled positions + SOP) differentiated in both, every parameter compared."""
  hf, directory = hf_dir
  model, params, config = albert_jax.from_pretrained(directory)
  ids, types, mask = inputs()
  labels = np.full(ids.shape, -100)
  labels[0, [2, 5]], labels[1, [1, 7]], labels[2, [4, 9, 12]] = [3, 40], [7, 98], [1, 2, 55]
  order = np.array([0, 1, 1])
  hf.zero_grad()
  hf(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types), attention_mask=torch.tensor(mask),
     labels=torch.tensor(labels), sentence_order_label=torch.tensor(order)).loss.backward()

  def loss(p):
    out = model.apply({'params': p}, jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask))
    labelled = labels != -100
    mlm = -jnp.take_along_axis(jax.nn.log_softmax(out.mlm_logits), np.maximum(labels, 0)[..., None], -1)[..., 0]
    sop = -jnp.take_along_axis(jax.nn.log_softmax(out.sop_logits), order[:, None], -1)[:, 0]
    return jnp.sum(mlm * labelled) / labelled.sum() + jnp.mean(sop)

  ours = interop.hf_state_dict(jax.grad(loss)(params), model.config)
  theirs = {name: p.grad.numpy() for name, p in hf.named_parameters()}
  assert set(theirs) <= set(ours)
  scale = max(np.abs(g).max() for g in theirs.values())  # the key bias's gradient is 0 up to rounding
  for name, grad in theirs.items():
    np.testing.assert_allclose(ours[name], grad, rtol=1e-3, atol=1e-6 * scale, err_msg=name)


def test_hf_to_ours_to_hf_is_exact(hf_dir, tmp_path):
  hf, directory = hf_dir
  model, params, _ = albert_jax.from_pretrained(directory)
  interop.save_hf(tmp_path, params, model.config)
  reloaded = transformers.AlbertForPreTraining.from_pretrained(tmp_path).eval()
  original = hf.state_dict()
  for name, tensor in reloaded.state_dict().items():
    assert torch.equal(tensor, original[name]), name
  assert reloaded.config.num_hidden_groups == hf.config.num_hidden_groups
  assert reloaded.config.hidden_act == hf.config.hidden_act
  for a, b in zip(hf_logits(reloaded, *inputs()), hf_logits(hf, *inputs())):
    np.testing.assert_array_equal(a, b)


def test_pytorch_bin_directory_loads_like_safetensors(tmp_path):
  hf = hf_model(num_hidden_layers=2, num_hidden_groups=2)
  hf.save_pretrained(tmp_path / 'st')
  # transformers 5 writes only safetensors; older releases (and the hub's older models) have a pickled
  # state dict, tied decoder included.
  (tmp_path / 'bin').mkdir()
  (tmp_path / 'bin' / 'config.json').write_text((tmp_path / 'st' / 'config.json').read_text())
  torch.save(hf.state_dict(), tmp_path / 'bin' / 'pytorch_model.bin')
  _, from_st, _ = albert_jax.from_pretrained(tmp_path / 'st')
  _, from_bin, _ = albert_jax.from_pretrained(tmp_path / 'bin')
  jax.tree.map(np.testing.assert_array_equal, from_st, from_bin)


# The original TF names, from the HF converter's rules (albert-original.md 7.1), written independently of
# albert_jax/interop.py's tables.
def hf_name_to_tf(name: str):
  rules = [(r'^albert\.embeddings\.(\w+_embeddings)\.weight$', r'bert/embeddings/\1'),
           (r'^albert\.embeddings\.LayerNorm\.', 'bert/embeddings/LayerNorm/'),
           (r'^albert\.encoder\.embedding_hidden_mapping_in\.', 'bert/encoder/embedding_hidden_mapping_in/'),
           (r'^albert\.encoder\.albert_layer_groups\.(\d+)\.albert_layers\.(\d+)\.',
            r'bert/encoder/transformer/group_\1/inner_group_\2/'),
           (r'attention\.(query|key|value)\.', r'attention_1/self/\1/'),
           (r'attention\.dense\.', 'attention_1/output/dense/'),
           (r'attention\.LayerNorm\.', 'LayerNorm/'),
           (r'/ffn_output\.', '/ffn_1/intermediate/output/dense/'),
           (r'/ffn\.', '/ffn_1/intermediate/dense/'),
           (r'full_layer_layer_norm\.', 'LayerNorm_1/'),
           (r'^albert\.pooler\.', 'bert/pooler/dense/'),
           (r'^predictions\.dense\.', 'cls/predictions/transform/dense/'),
           (r'^predictions\.LayerNorm\.', 'cls/predictions/transform/LayerNorm/'),
           (r'^predictions\.bias$', 'cls/predictions/output_bias'),
           (r'^sop_classifier\.classifier\.weight$', 'cls/seq_relationship/output_weights'),
           (r'^sop_classifier\.classifier\.bias$', 'cls/seq_relationship/output_bias')]
  for pattern, replacement in rules:
    name = re.sub(pattern, replacement, name)
  layer_norm = '/LayerNorm' in name
  name = re.sub(r'/weight$', '/gamma' if layer_norm else '/kernel', name)
  name = re.sub(r'/bias$', '/beta' if layer_norm else '/bias', name)
  return name


def write_tf1_checkpoint(directory: pathlib.Path, hf: transformers.AlbertForPreTraining, with_slots=True):
  import tensorflow as tf
  tensors = {}
  for name, tensor in hf.state_dict().items():
    if name.startswith('predictions.decoder'):
      continue  # tied
    value = tensor.numpy()
    tf_name = hf_name_to_tf(name)
    if tf_name.endswith('/kernel'):
      value = value.T  # torch Linear is [out, in]; TF kernels are [in, out]
    tensors[tf_name] = value
  if with_slots:  # the release's checkpoints also hold optimizer slots and the step; they must be skipped
    tensors['bert/pooler/dense/kernel/adam_m'] = np.zeros_like(tensors['bert/pooler/dense/kernel'])
    tensors['global_step'] = np.int64(1000)
  with tf.Graph().as_default():
    variables = [tf.compat.v1.get_variable(n, initializer=v) for n, v in tensors.items()]
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      tf.compat.v1.train.Saver(variables).save(session, str(directory / 'model.ckpt-1000'), write_meta_graph=False)
  c = hf.config
  act = {'gelu_new': 'gelu', 'gelu': 'gelu_exact', 'relu': 'relu'}[c.hidden_act]
  (directory / 'albert_config.json').write_text(json.dumps(dict(
      vocab_size=c.vocab_size, embedding_size=c.embedding_size, hidden_size=c.hidden_size,
      num_hidden_layers=c.num_hidden_layers, num_hidden_groups=c.num_hidden_groups,
      inner_group_num=c.inner_group_num, num_attention_heads=c.num_attention_heads,
      intermediate_size=c.intermediate_size, hidden_act=act, max_position_embeddings=c.max_position_embeddings,
      type_vocab_size=c.type_vocab_size, initializer_range=0.02, hidden_dropout_prob=0,
      attention_probs_dropout_prob=0, net_structure_type=0, gap_size=0, num_memory_blocks=0, down_scale_factor=1)))
  return set(tensors) - {'bert/pooler/dense/kernel/adam_m', 'global_step'}


@pytest.mark.parametrize('shape', ['plain', 'grouped'])
def test_original_tf_checkpoint_logits_match_hf(shape, tmp_path):
  hf = hf_model(seed=3, **SHAPES[shape])
  write_tf1_checkpoint(tmp_path, hf)
  for path in (tmp_path, tmp_path / 'model.ckpt-1000'):  # a directory, or the checkpoint prefix itself
    model, params, _ = albert_jax.from_pretrained(path)
    for ours, theirs in zip(our_logits(model, params, *inputs()), hf_logits(hf, *inputs())):
      np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)


def test_export_to_original_tf_names_round_trips(tmp_path):
  hf = hf_model(seed=4, **SHAPES['grouped'])
  expected_names = write_tf1_checkpoint(tmp_path / 'reference', hf, with_slots=False)
  _, params, config = albert_jax.from_pretrained(tmp_path / 'reference')
  interop.save_tf(tmp_path / 'exported', params, ModelConfig.from_config(config.model))
  import tensorflow as tf
  reader = tf.train.load_checkpoint(str(tmp_path / 'exported' / 'model.ckpt'))
  assert set(reader.get_variable_to_shape_map()) == expected_names
  for name in expected_names:
    np.testing.assert_array_equal(reader.get_tensor(name),
                                  tf.train.load_checkpoint(str(tmp_path / 'reference')).get_tensor(name))


@pytest.mark.parametrize('sharing', ['attention', 'ffn', 'none'])
def test_sharing_hf_cannot_express_exports_as_one_group_per_layer(sharing, tmp_path):
  cfg = ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=3, num_heads=4,
                    intermediate_size=37, max_position_embeddings=40, sharing=sharing, inner_group_num=2)
  model = Albert(cfg)
  params = jax.tree.map(np.asarray, nn.unbox(init_params(model, jax.random.key(5))))
  interop.save_hf(tmp_path, params, cfg)
  hf = transformers.AlbertForPreTraining.from_pretrained(tmp_path).eval()
  assert (hf.config.num_hidden_groups, hf.config.inner_group_num) == (3, 2)
  for ours, theirs in zip(our_logits(model, params, *inputs()), hf_logits(hf, *inputs())):
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)


def test_bert_shape_without_projection_exports_an_identity_mapping(tmp_path):
  cfg = ModelConfig(vocab_size=99, embedding_size=32, hidden_size=32, num_layers=2, num_heads=4,
                    intermediate_size=37, max_position_embeddings=40, sharing='none')
  model = Albert(cfg)
  params = jax.tree.map(np.asarray, nn.unbox(init_params(model, jax.random.key(6))))
  interop.save_hf(tmp_path, params, cfg)
  hf = transformers.AlbertForPreTraining.from_pretrained(tmp_path).eval()
  for ours, theirs in zip(our_logits(model, params, *inputs()), hf_logits(hf, *inputs())):
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
  back, back_params, _ = albert_jax.from_pretrained(tmp_path)
  assert 'embedding_projection' not in back_params['encoder']
  # HF keeps an E -> H mapping when E == H: a real (non-identity) one is loaded as it is, and exported back.
  with torch.no_grad():
    hf.albert.encoder.embedding_hidden_mapping_in.weight.mul_(2.0)
    hf.albert.encoder.embedding_hidden_mapping_in.bias.add_(0.1)
  hf.save_pretrained(tmp_path / 'scaled')
  model, params, config = albert_jax.from_pretrained(tmp_path / 'scaled')
  assert config.model.embedding_projection and 'embedding_projection' in params['encoder']
  for ours, theirs in zip(our_logits(model, params, *inputs()), hf_logits(hf, *inputs())):
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
  interop.save_hf(tmp_path / 'again', params, ModelConfig.from_config(config.model))
  again = transformers.AlbertForPreTraining.from_pretrained(tmp_path / 'again').state_dict()
  for name, tensor in hf.state_dict().items():
    np.testing.assert_array_equal(again[name].numpy(), tensor.numpy(), err_msg=name)


def test_our_format_round_trips_exactly(tmp_path):
  config = defaults()
  config.model.update(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=4, num_heads=4,
                      intermediate_size=37, max_position_embeddings=40, sharing='attention')
  config.data.max_seq_length = 40
  model = Albert(ModelConfig.from_config(config.model))
  params = nn.unbox(init_params(model, jax.random.key(7)))
  interop.save(tmp_path / 'ckpt', params, config)
  loaded_model, loaded, loaded_config = albert_jax.from_pretrained(tmp_path / 'ckpt')
  assert loaded_config.to_dict() == config.to_dict() and loaded_model.config == model.config
  jax.tree.map(np.testing.assert_array_equal, params, loaded)


# --- bad input: a clear message naming the problem, never a half-loaded model -------------------------------

def test_missing_path_names_the_accepted_formats(tmp_path):
  with pytest.raises(CheckpointError, match='no checkpoint found.*HuggingFace directory.*original TF'):
    albert_jax.from_pretrained(tmp_path / 'nothing_here')


def test_truncated_safetensors_is_reported(tmp_path):
  hf_model(num_hidden_layers=1).save_pretrained(tmp_path)
  weights = tmp_path / 'model.safetensors'
  weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
  with pytest.raises(CheckpointError, match='truncated or corrupt'):
    albert_jax.from_pretrained(tmp_path)


def test_config_that_does_not_describe_the_tensors_is_reported(tmp_path):
  hf_model(num_hidden_layers=1).save_pretrained(tmp_path)
  config = json.loads((tmp_path / 'config.json').read_text())
  config['intermediate_size'] = 64
  (tmp_path / 'config.json').write_text(json.dumps(config))
  with pytest.raises(CheckpointError, match='ffn.weight has shape .* config implies'):
    albert_jax.from_pretrained(tmp_path)
  config.update(intermediate_size=37, num_hidden_groups=2, num_hidden_layers=2)
  (tmp_path / 'config.json').write_text(json.dumps(config))
  with pytest.raises(CheckpointError, match='lacks .* tensors'):
    albert_jax.from_pretrained(tmp_path)


def test_tf_checkpoint_without_its_config_is_reported(tmp_path):
  write_tf1_checkpoint(tmp_path, hf_model(num_hidden_layers=1))
  (tmp_path / 'albert_config.json').unlink()
  with pytest.raises(CheckpointError, match='albert_config.json is missing'):
    albert_jax.from_pretrained(tmp_path)


def test_damaged_orbax_checkpoint_is_reported(tmp_path):
  config = defaults()
  config.model.update(vocab_size=50, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                      intermediate_size=16)
  params = nn.unbox(init_params(Albert(ModelConfig.from_config(config.model)), jax.random.key(0)))
  interop.save(tmp_path, params, config)
  for f in (tmp_path / 'params').rglob('*'):
    if f.is_file() and 'manifest' in f.name:
      f.write_bytes(b'')
  data_files = [f for f in (tmp_path / 'params').rglob('*') if f.is_file() and f.stat().st_size > 0]
  for f in data_files:
    f.write_bytes(f.read_bytes()[:10])
  with pytest.raises(CheckpointError, match='cannot be restored'):
    albert_jax.from_pretrained(tmp_path)


# --- the CLI --------------------------------------------------------------------------------------------------

def convert(*args):
  return subprocess.run([sys.executable, '-m', 'albert_jax.convert', *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)


def test_convert_cli_hf_to_ours_to_hf_and_tf(tmp_path, builtin_tokenizer):
  hf = hf_model(seed=8, vocab_size=builtin_tokenizer.vocab_size, **SHAPES['grouped'])
  hf.save_pretrained(tmp_path / 'hf')
  # HF's own save has no vocabulary: the HF export refuses to write a directory that would tokenize every word as
  # <unk>, before writing anything, until it is given one.
  refused = convert(f'--input={tmp_path / "hf"}', f'--output={tmp_path / "no_vocab"}', '--to=hf')
  assert refused.returncode == 2 and 'names no vocabulary' in refused.stderr and '--vocab=' in refused.stderr
  assert not (tmp_path / 'no_vocab').exists()
  vocab = f'--vocab={builtin_tokenizer.path}'
  for source, target, fmt in [('hf', 'ours', 'albert_jax'), ('ours', 'hf2', 'hf'), ('ours', 'tf', 'tf')]:
    out = convert(f'--input={tmp_path / source}', f'--output={tmp_path / target}', f'--to={fmt}', vocab)
    assert out.returncode == 0, out.stderr
  assert (tmp_path / 'hf2' / 'spiece.model').read_bytes() == pathlib.Path(builtin_tokenizer.path).read_bytes()
  reloaded = transformers.AlbertForPreTraining.from_pretrained(tmp_path / 'hf2')
  for name, tensor in reloaded.state_dict().items():
    assert torch.equal(tensor, hf.state_dict()[name]), name
  model, params, _ = albert_jax.from_pretrained(tmp_path / 'tf')
  for ours, theirs in zip(our_logits(model, params, *inputs()), hf_logits(hf, *inputs())):
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
  refused = convert(f'--input={tmp_path / "hf"}', f'--output={tmp_path / "hf2"}', '--to=hf', vocab)
  assert refused.returncode != 0 and 'is not empty' in refused.stderr


# --- downstream heads: HF's classes, loaded and exported -------------------------------------------------------------

HEAD_CLASSES = {'AlbertForSequenceClassification': dict(num_labels=3),
                'AlbertForMultipleChoice': {}, 'AlbertForQuestionAnswering': {}}


@pytest.mark.parametrize('architecture', list(HEAD_CLASSES))
def test_hf_downstream_models_load_with_their_heads_and_match_hf(architecture, tmp_path):
  torch.manual_seed(3)
  config = transformers.AlbertConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_attention_heads=4,
                                     intermediate_size=37, max_position_embeddings=40, num_hidden_layers=2,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                     classifier_dropout_prob=0.1, **HEAD_CLASSES[architecture])
  hf = getattr(transformers, architecture)(config).eval()
  with torch.no_grad():
    for p in hf.parameters():
      p.add_(0.05 * torch.randn_like(p))
  hf.save_pretrained(tmp_path / 'hf')
  model, params, loaded = albert_jax.from_pretrained(tmp_path / 'hf')
  assert loaded.head.architecture == architecture and 'mlm_head' not in params
  ids, types, mask = inputs(batch=6, length=12)
  if architecture == 'AlbertForMultipleChoice':  # [batch, choices, length], as HF takes them
    ids, types, mask = (x.reshape(2, 3, 12) for x in (ids, types, mask))
  with torch.no_grad():
    theirs = hf(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types), attention_mask=torch.tensor(mask))
  ours = model.apply({'params': params}, jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask))
  names = ('start_logits', 'end_logits') if architecture == 'AlbertForQuestionAnswering' else ('logits',)
  for name in names:
    expected = getattr(theirs, name).numpy()
    assert getattr(ours, name).shape == expected.shape
    np.testing.assert_allclose(getattr(ours, name), expected, atol=1e-4, rtol=0)
  # ... and export back to the same HF class, tensor for tensor.
  interop.save_hf(tmp_path / 'again', params, ModelConfig.from_config(loaded.model), loaded.head)
  again = getattr(transformers, architecture).from_pretrained(tmp_path / 'again').state_dict()
  for name, tensor in hf.state_dict().items():
    np.testing.assert_array_equal(again[name].numpy(), tensor.numpy(), err_msg=name)
  # Ours too: a fine-tuned checkpoint keeps its head.
  interop.save(tmp_path / 'ours', params, loaded)
  _, back, back_config = albert_jax.from_pretrained(tmp_path / 'ours')
  assert back_config.head.architecture == architecture
  jax.tree.map(np.testing.assert_array_equal, back, params)
