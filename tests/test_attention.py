"""The attention switch, model.attention = auto | xla | cudnn, on a CPU.

cuDNN's kernel cannot run here. What can be checked is everything around it: which implementation 'auto' picks
(XLA on CPU and TPU, and on a GPU whose cuDNN cannot compile the kernel), the config errors, and the cuDNN path's
plumbing (its [batch, length, heads, head_dim] layout, its scale, padding given as row lengths, every head
reaching it through the backbone). For the plumbing, jax.nn.dot_product_attention is run with implementation='xla'
in place of 'cudnn': JAX's reference for the same call, which honours the lengths as cuDNN does. The kernel itself
is compared with XLA's on a GPU by bench/accelerator.py (--check_attention)."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from albert_jax import model as model_lib
from albert_jax.config import defaults, validate
from albert_jax.downstream import heads
from albert_jax.errors import ConfigError
from albert_jax.model import Albert, ModelConfig

# A wide initializer makes the attention peaked, so that a wrong scale or a wrong mask shows in the outputs.
# scan_unroll named, as train and finetune resolve it before building: a model left to resolve it at apply time
# checks 'cudnn' against this CPU and refuses it.
SMALL = dict(vocab_size=97, embedding_size=16, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=48,
             max_position_embeddings=32, dtype='bfloat16', initializer_range=0.3, scan_unroll=3)
CLOSE = dict(atol=0.06, rtol=0.03)  # two orders of bfloat16 arithmetic


def inputs(b=3, s=16):
  rng = np.random.RandomState(0)
  ids = rng.randint(5, 97, (b, s))
  types = np.zeros_like(ids)
  types[:, s // 2:] = 1
  mask = np.ones_like(ids)
  mask[1, s - 5:] = 0  # right padding, as every batch albert_jax makes
  mask[2, s - 1:] = 0
  return jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask)


@pytest.fixture
def cudnn_call_on_cpu(monkeypatch):
  """jax.nn.dot_product_attention with 'cudnn' run as JAX's XLA reference; records that the cuDNN path called it."""
  real, calls = jax.nn.dot_product_attention, []

  def reference(*args, implementation=None, **kwargs):
    calls.append({'implementation': implementation, **{k: v is not None for k, v in kwargs.items()}})
    return real(*args, implementation='xla', **kwargs)

  monkeypatch.setattr(jax.nn, 'dot_product_attention', reference)
  return calls


def test_auto_is_xla_on_cpu_and_tpu_and_where_cudnn_cannot_take_the_model():
  cfg = ModelConfig(**SMALL)
  assert cfg.attention == 'auto'
  assert cfg.for_platform('cpu').attention == 'xla'
  assert cfg.for_platform('tpu').attention == 'xla'
  assert cfg.for_platform('gpu').attention == 'xla'  # this machine's cuDNN (none) does not compile the kernel
  # Float32, an odd head size or attention dropout rule cuDNN out without trying.
  for change in ({'dtype': 'float32'}, {'hidden_size': 36, 'num_heads': 6}, {'attention_dropout_rate': 0.1}):
    refused = ModelConfig(**{**SMALL, **change})
    assert refused.cudnn_refusal() and refused.for_platform('gpu').attention == 'xla'
  assert ModelConfig(**SMALL).cudnn_refusal() is None


def test_auto_compiles_the_same_program_as_xla_on_cpu():
  ids, types, mask = inputs()
  texts = []
  for attention in ('auto', 'xla'):
    model = Albert(ModelConfig(**{**SMALL, 'attention': attention}))
    params = nn.unbox(model_lib.init_params(model, jax.random.key(0)))
    texts.append(jax.jit(lambda p: model.apply({'params': p}, ids, types, mask).mlm_logits).lower(params).as_text())
  assert texts[0] == texts[1]
  assert 'cudnn' not in texts[0].lower()


@pytest.mark.parametrize('change, message', [
    ({'dtype': 'float32'}, 'set model.dtype=bfloat16'),
    ({'hidden_size': 36, 'num_heads': 6}, 'multiple of 8'),
    ({'attention_dropout_rate': 0.1}, 'attention_dropout_rate=0'),
    ({'attention': 'flash'}, 'unknown attention'),
])
def test_cudnn_settings_it_cannot_run_are_refused_with_the_fix(change, message):
  with pytest.raises(ConfigError, match=message):
    ModelConfig(**{**SMALL, 'attention': 'cudnn', **change})


def test_cudnn_anywhere_but_on_a_gpu_is_refused():
  cfg = ModelConfig(**{**SMALL, 'attention': 'cudnn'})
  assert cfg.for_platform('gpu').attention == 'cudnn'
  for platform in ('cpu', 'tpu'):
    with pytest.raises(ConfigError, match=f"'cudnn' needs an NVIDIA GPU, and these devices are {platform}"):
      cfg.for_platform(platform)


def test_cudnn_path_computes_the_xla_attention_with_lengths_for_padding(cudnn_call_on_cpu):
  """The same parameters through both paths: MLM and SOP logits and every gradient agree within bf16 precision,
  at the real positions (cuDNN gives padded query rows zeros, XLA's path does not, and nothing reads them)."""
  ids, types, mask = inputs()
  positions = jnp.asarray([[1, 4, 9], [2, 3, 5], [0, 7, 14]])
  xla = Albert(ModelConfig(**{**SMALL, 'attention': 'xla'}))
  cudnn = Albert(ModelConfig(**{**SMALL, 'attention': 'cudnn'}))
  params = nn.unbox(model_lib.init_params(xla, jax.random.key(1)))

  def loss(model, p):
    out = model.apply({'params': p}, ids, types, mask, masked_lm_positions=positions)
    return out.mlm_logits.sum() + out.sop_logits.sum(), out

  (_, ref), ref_grads = jax.value_and_grad(lambda p: loss(xla, p), has_aux=True)(params)
  (_, out), grads = jax.value_and_grad(lambda p: loss(cudnn, p), has_aux=True)(params)
  assert cudnn_call_on_cpu and all(c['implementation'] == 'cudnn' and c['query_seq_lengths'] and
                                   c['key_value_seq_lengths'] and not c.get('mask') and not c.get('bias')
                                   for c in cudnn_call_on_cpu)
  np.testing.assert_allclose(out.mlm_logits, ref.mlm_logits, **CLOSE)
  np.testing.assert_allclose(out.sop_logits, ref.sop_logits, **CLOSE)
  real = np.asarray(mask, bool)
  np.testing.assert_allclose(np.asarray(out.sequence_output, np.float32)[real],
                             np.asarray(ref.sequence_output, np.float32)[real], **CLOSE)
  # Within 5% of each gradient's largest entry, bar a floor at 0.1% of the largest gradient of all: the key
  # bias's gradient is zero in exact arithmetic (softmax ignores a shift shared by all keys) and noise in both.
  floor = 1e-3 * max(float(jnp.abs(r).max()) for r in jax.tree.leaves(ref_grads))
  for (path, g), r in zip(jax.tree_util.tree_flatten_with_path(grads)[0], jax.tree.leaves(ref_grads)):
    assert float(jnp.abs(g - r).max()) <= 0.05 * float(jnp.abs(r).max()) + floor, jax.tree_util.keystr(path)


@pytest.mark.parametrize('head', ['classifier', 'multiple_choice', 'span_v1', 'span_v2'])
def test_every_downstream_head_reaches_the_cudnn_path(head, cudnn_call_on_cpu):
  ids, types, mask = inputs()
  make = {'classifier': lambda cfg: heads.SequenceClassifier(cfg, num_labels=3),
          'multiple_choice': lambda cfg: heads.MultipleChoice(cfg),
          'span_v1': lambda cfg: heads.SpanV1(cfg),
          'span_v2': lambda cfg: heads.SpanV2(cfg)}[head]
  if head == 'multiple_choice':
    ids, types, mask = (x.reshape(1, 3, -1) for x in (ids, types, mask))
  outputs = []
  for attention in ('xla', 'cudnn'):
    model = make(ModelConfig(**{**SMALL, 'attention': attention}))
    # SQuAD 2.0's head normalizes over the positions an answer may take: padding is never among them.
    extra = {'p_mask': 1 - mask} if head == 'span_v2' else {}
    variables = model.init(jax.random.key(0), ids, types, mask, **extra)
    outputs.append(model.apply(variables, ids, types, mask, **extra))
  assert cudnn_call_on_cpu  # the cuDNN configuration went through jax.nn.dot_product_attention
  names = [f.name for f in dataclasses.fields(outputs[0]) if getattr(outputs[0], f.name) is not None]
  for name in names:
    if name.endswith('index'):
      continue
    a, b = (np.asarray(getattr(o, name), np.float32) for o in outputs)
    # Per-position outputs only where the tokens are real (cuDNN zeroes padded rows); not where a span head puts
    # its -1e30 (no answer can be there).
    keep = np.asarray(mask, bool) if a.shape == mask.shape else np.ones(a.shape, bool)
    keep &= np.abs(a) < 1e20
    np.testing.assert_allclose(b[keep], a[keep], err_msg=name, **CLOSE)


def test_the_config_field_reaches_pretraining_and_fine_tuning():
  config = defaults()
  config.model.update(dtype='bfloat16', attention='cudnn')
  assert validate(config).attention == 'cudnn'
  assert 'attention' in model_lib.RUNTIME_FIELDS  # applies to a loaded model as dtype and remat do
