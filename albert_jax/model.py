"""ALBERT in Flax linen: factorized embeddings, one shared post-LN block under nn.scan, MLM and SOP heads.

Parameter layout (kernels are 2-D [in, out], as in the original TF code):

  embeddings/{word_embeddings,position_embeddings,token_type_embeddings}, embeddings/layer_norm
  encoder/embedding_projection                 E -> H, only when E != H (as the original)
  encoder/block/attention/{query,key,value,output,layer_norm}
  encoder/block/ffn/{intermediate,output,layer_norm}
  pooler                                       tanh dense on [CLS]
  mlm_head/{transform,layer_norm,output_bias}  decoder tied to the word embeddings
  sop_head                                     [H, 2]

Cross-layer sharing: the encoder is `nn.scan` over ONE block with `variable_broadcast='params'`, so the compiled
program is the same size for 12 or 48 layers. A part of the block that is not shared across all layers (the FFN
under sharing='attention', everything under sharing='none', the groups of num_groups > 1) keeps its copies
stacked on a leading 'layers' axis, and each scan step picks its copy by index.
"""
import dataclasses
import difflib
import functools
import math
from typing import Any, Optional

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
from absl import logging

from albert_jax.errors import ConfigError

LAYER_NORM_EPS = 1e-12  # The original uses 1e-12 everywhere, the MLM transform's LayerNorm included.
MASK_BIAS = -10000.0  # Added to the attention scores of padded keys, as the original.

SHARING = ('all', 'attention', 'ffn', 'none')


@jax.custom_jvp
def gelu_tanh(x):
  """GELU's tanh approximation, as the original's 'gelu' (HF: 'gelu_new'; jax.nn.gelu(approximate=True))."""
  return jax.nn.gelu(x, approximate=True)


@gelu_tanh.defjvp
def _gelu_tanh_jvp(primals, tangents):
  # The derivative from x alone: the backward pass keeps one array per activation where autodiff of the formula
  # keeps five (x², x³, the tanh, ...), each written to memory on the forward pass.
  (x,), (dx,) = primals, tangents
  c, a = math.sqrt(2 / math.pi), 0.044715
  t = jnp.tanh(c * (x + a * x * x * x))
  slope = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x)
  return 0.5 * x * (1 + t), slope * dx


ACTIVATIONS = {
    # 'gelu' is the tanh approximation, as in the original TF code (HF calls it 'gelu_new').
    'gelu': gelu_tanh,
    'gelu_exact': lambda x: jax.nn.gelu(x, approximate=False),
    'relu': jax.nn.relu,
    'tanh': jnp.tanh,
    'linear': lambda x: x,
}
# 'auto' is for training to resolve: the cheapest setting that fits the devices (fit.py), remat none where the
# step fits without. A model built with it unresolved (evaluation, inference: no backward pass) keeps everything.
REMAT_POLICIES = {
    'auto': None,
    'none': None,  # keep every activation of every layer
    'full': jax.checkpoint_policies.nothing_saveable,  # recompute the whole block in the backward pass
    'save_dots': jax.checkpoint_policies.checkpoint_dots,
    'save_dots_no_batch': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
DTYPES = ('float32', 'bfloat16', 'float16')
# 'xla': the attention written out below (its own backward pass); 'cudnn': cuDNN's fused kernel through
# jax.nn.dot_product_attention (NVIDIA GPUs); 'auto': cuDNN on a GPU where it takes the model, else XLA.
ATTENTION = ('auto', 'xla', 'cudnn')


# Settings of config.model that apply to a loaded model (its shape comes from the checkpoint): fine-tuning takes
# them from its own config, and the random-weight control takes every other field from the checkpoint's.
RUNTIME_FIELDS = ('dropout_rate', 'attention_dropout_rate', 'dtype', 'param_dtype', 'remat', 'scan_unroll',
                  'attention')


def model_shape(fields) -> dict:
  """The fields of a config.model (a dict or ConfigDict) that fix the model's shape: all but RUNTIME_FIELDS. What
  random weights "of a checkpoint's shape" copy from it."""
  return {k: v for k, v in fields.items() if k not in RUNTIME_FIELDS}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The model's shape and numerics. Field names are those of `config.model` (config.py builds it from these).

  The defaults are ALBERT-base (Table 2 of the paper, the released v2 config).
  """
  vocab_size: int = 30000
  embedding_size: int = 128
  hidden_size: int = 768
  num_layers: int = 12
  num_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = 'gelu'
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  initializer_range: float = 0.02
  # Which parts of the block all layers share (paper Table 5): 'all' (ALBERT), 'attention' (FFN per layer),
  # 'ffn' (attention per layer), 'none' (BERT).
  sharing: str = 'all'
  # The original code's num_hidden_groups / inner_group_num: layer i uses group i*num_groups//num_layers,
  # and each layer runs inner_group_num blocks of its group.
  num_groups: int = 1
  inner_group_num: int = 1
  dtype: str = 'float32'  # compute dtype; 'bfloat16' on TPU
  param_dtype: str = 'float32'
  remat: str = 'none'  # one of REMAT_POLICIES
  attention: str = 'auto'  # one of ATTENTION
  # Blocks per iteration of the scanned loop. 1 keeps the compiled program the same size at any depth (what
  # TPUs want); num_layers unrolls it, which spares XLA copying every layer's activations in and out of the loop's
  # stacks at a program size and compile time that grow with depth. 0, the default, chooses by platform
  # (for_platform): every block on a GPU (those copies cost an H200 8 to 15% of the step, docs/benchmarks.md) and on
  # a CPU (the gradient 5-10% faster at 4 layers, 8-14% at ALBERT-base's 12 and 24, for 0.3 s more compiling at
  # 12 and 1 s at 24: docs/model.md); 1 on a TPU, and wherever remat is on: unrolled, XLA schedules the
  # recomputed forward pass early and keeps every activation (ALBERT-base's gradient on a CPU: 933 MiB of
  # temporaries with remat='full' unrolled, as without remat, against 128 MiB with the loop kept).
  scan_unroll: int = 0
  # Keep a dense E -> H projection even when E == H. The original (and BERT) have none then; HF's ALBERT always
  # has one, so an HF model with E == H is loaded with it.
  embedding_projection: bool = False

  def __post_init__(self):
    def fail(msg):
      raise ConfigError(f'config.model: {msg}')

    for name in ('vocab_size', 'embedding_size', 'hidden_size', 'num_layers', 'num_heads', 'intermediate_size',
                 'max_position_embeddings', 'type_vocab_size', 'num_groups', 'inner_group_num', 'scan_unroll'):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == 'scan_unroll' else 1):
        fail(f'{name} must be a positive integer{" (or 0: by platform)" if name == "scan_unroll" else ""}, '
             f'got {value!r}.')
    if self.hidden_size % self.num_heads:
      fail(f'hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}; choose num_heads '
           f'among the divisors of hidden_size (the released models use a head size of 64 or 128).')
    if self.num_layers % self.num_groups:
      fail(f'num_layers {self.num_layers} is not divisible by num_groups {self.num_groups}; each group must '
           f'serve the same number of consecutive layers.')
    if self.sharing not in SHARING:
      fail(f'unknown sharing {self.sharing!r}; expected one of {", ".join(SHARING)} (paper Table 5).')
    if self.sharing != 'all' and self.num_groups != 1:
      fail(f"num_groups={self.num_groups} needs sharing='all': groups split the shared block, and "
           f"sharing={self.sharing!r} already gives its unshared part one copy per layer.")
    if self.hidden_act not in ACTIVATIONS:
      fail(f'unknown hidden_act {self.hidden_act!r}; expected one of {", ".join(ACTIVATIONS)} '
           f"('gelu' is the tanh approximation, as in the original).")
    if self.remat not in REMAT_POLICIES:
      fail(f'unknown remat {self.remat!r}; expected one of {", ".join(REMAT_POLICIES)}.')
    for name in ('dtype', 'param_dtype'):
      if getattr(self, name) not in DTYPES:
        fail(f'{name} {getattr(self, name)!r} is not one of {", ".join(DTYPES)}.')
    for name in ('dropout_rate', 'attention_dropout_rate'):
      if not 0.0 <= getattr(self, name) < 1.0:
        fail(f'{name} must be in [0, 1), got {getattr(self, name)!r}.')
    if not self.initializer_range > 0:
      fail(f'initializer_range must be positive, got {self.initializer_range!r}.')
    if self.attention not in ATTENTION:
      fail(f'unknown attention {self.attention!r}; expected one of {", ".join(ATTENTION)}.')
    if self.attention == 'cudnn' and self.cudnn_refusal():
      fail(f"attention 'cudnn': {self.cudnn_refusal()}; or use attention 'xla' (or 'auto', which picks cuDNN only "
           f"where it can).")

  @classmethod
  def from_config(cls, model_config) -> 'ModelConfig':
    """From `config.model` (a ConfigDict or dict); unknown fields are refused with the closest known name."""
    values = dict(model_config)
    known = [f.name for f in dataclasses.fields(cls)]
    for name in values:
      if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f' Did you mean {close[0]!r}?' if close else f' Known fields: {", ".join(known)}.'
        raise ConfigError(f'config.model: unknown field {name!r}.{hint}')
    return cls(**values)

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  def cudnn_refusal(self) -> Optional[str]:
    """Why cuDNN's fused attention cannot run this model (with the fix), or None if it can."""
    if self.dtype == 'float32':
      return "cuDNN's fused attention computes in bfloat16 or float16: set model.dtype=bfloat16"
    if self.head_dim % 8 or self.head_dim > 256:
      return (f'cuDNN needs a head size that is a multiple of 8 and at most 256; hidden_size {self.hidden_size} / '
              f'num_heads {self.num_heads} is {self.head_dim}')
    if self.attention_dropout_rate:
      return "cuDNN's fused attention has no dropout: set model.attention_dropout_rate=0"
    return None

  def for_platform(self, platform: str) -> 'ModelConfig':
    """This config with its by-platform choices made for devices of `platform` ('cpu', 'gpu', 'tpu'): `attention`
    'auto' becomes 'cudnn' on a GPU whose cuDNN takes the model, else 'xla' ('cudnn' anywhere but on a GPU is a
    ConfigError); `scan_unroll` 0 becomes 1 on a TPU or with remat on, else every block."""
    if self.attention == 'cudnn' and platform != 'gpu':
      raise ConfigError(f"config.model.attention 'cudnn' needs an NVIDIA GPU, and these devices are {platform}: use "
                        f"'auto' (XLA here, cuDNN on a GPU) or 'xla'.")
    chosen = {}
    if self.attention == 'auto':
      cudnn = (platform == 'gpu' and self.cudnn_refusal() is None and
               cudnn_attention_compiles(self.head_dim, self.dtype))
      chosen['attention'] = 'cudnn' if cudnn else 'xla'
    if self.scan_unroll == 0:
      chosen['scan_unroll'] = 1 if platform == 'tpu' or REMAT_POLICIES[self.remat] is not None else self.num_blocks
    return dataclasses.replace(self, **chosen) if chosen else self

  @property
  def num_blocks(self) -> int:
    """Blocks executed per forward pass: every layer runs inner_group_num blocks."""
    return self.num_layers * self.inner_group_num

  @property
  def attention_copies(self) -> int:
    """Distinct attention parameter sets."""
    return self.num_groups * self.inner_group_num if self.sharing in ('all', 'attention') else self.num_blocks

  @property
  def ffn_copies(self) -> int:
    """Distinct feed-forward parameter sets."""
    return self.num_groups * self.inner_group_num if self.sharing in ('all', 'ffn') else self.num_blocks

  def block_copy(self, block_index, copies: int):
    """Which of `copies` parameter sets the block at `block_index` (0 .. num_blocks-1) uses."""
    if copies == self.num_blocks:
      return block_index
    layer, inner = block_index // self.inner_group_num, block_index % self.inner_group_num
    group = layer * self.num_groups // self.num_layers
    return group * self.inner_group_num + inner


@flax.struct.dataclass
class AlbertOutput:
  sequence_output: jax.Array  # [batch, length, hidden]
  pooled_output: jax.Array  # [batch, hidden]
  mlm_logits: jax.Array  # [batch, predictions, vocab] at masked_lm_positions, else [batch, length, vocab]
  sop_logits: jax.Array  # [batch, 2]; class 1 = swapped (SOP) or random next (NSP)


def initializer(config: ModelConfig):
  # TF's truncated_normal_initializer: N(0, stddev) cut at 2 stddev and NOT rescaled (actual std ~0.88 stddev).
  stddev = config.initializer_range
  return lambda key, shape, dtype=jnp.float32: stddev * jax.random.truncated_normal(key, -2.0, 2.0, shape, dtype)


def _layer_param(module: nn.Module, name: str, init, shape, axes, copies: int, copy):
  """A parameter that is shared (copies == 1) or one of `copies` stacked along a leading 'layers' axis."""
  dtype = jnp.dtype(module.config.param_dtype)
  if copies == 1:
    return module.param(name, nn.with_logical_partitioning(init, axes), shape, dtype)
  stacked = module.param(name, nn.with_logical_partitioning(init, ('layers',) + axes), (copies,) + shape, dtype)
  return jax.lax.dynamic_index_in_dim(stacked, copy, keepdims=False)


@jax.custom_vjp
def add_bias(x, bias):
  """x + bias over the last axis, for the MLM head's logits. The bias's gradient, the cotangent summed over every
  other axis, is computed as a product with a vector of ones: XLA:CPU runs that column sum over the vocabulary-wide
  logits as a reduction several times slower than the product its matrix library does (bench/step_profile.py:
  a tenth of the recipe's step; measured: the head alone at [640, 30,000] 35% faster, the whole training step 3-5%
  at the recipe's shape and 6% at the tiny config's). Not for the encoder's projections: there XLA fuses the plain
  sum with its neighbours, and the product made the tiny config's step 5% slower."""
  return x + bias


def _add_bias_forward(x, bias):
  return x + bias, None


def _add_bias_backward(_, g):
  rows = g.reshape(-1, g.shape[-1])
  ones = jnp.ones((rows.shape[0],), rows.dtype)
  return g, jnp.matmul(ones, rows, preferred_element_type=jnp.float32).astype(g.dtype)


add_bias.defvjp(_add_bias_forward, _add_bias_backward)


class Dense(nn.Module):
  """x @ kernel + bias with a 2-D [in, out] kernel (as TF and HF store it); `in_shape` trailing axes of x are
  contracted and `out_shape` axes produced, e.g. (hidden,) -> (heads, head_dim). 2-D kernels keep the optimizer's
  elementwise work on contiguous arrays: 3-D [H, heads, head_dim] kernels made XLA:CPU's update 5x slower."""
  config: ModelConfig
  in_shape: tuple
  out_shape: tuple
  in_axis: Optional[str]  # logical axis names of the flattened kernel dimensions
  out_axis: Optional[str]
  copies: int = 1

  @nn.compact
  def __call__(self, x, copy=None):
    n_in, n_out = math.prod(self.in_shape), math.prod(self.out_shape)
    kernel = _layer_param(self, 'kernel', initializer(self.config), (n_in, n_out), (self.in_axis, self.out_axis),
                          self.copies, copy)
    bias = _layer_param(self, 'bias', nn.initializers.zeros, (n_out,), (self.out_axis,), self.copies, copy)
    dtype = jnp.dtype(self.config.dtype)
    batch_shape = x.shape[:x.ndim - len(self.in_shape)]
    y = x.reshape(batch_shape + (n_in,)).astype(dtype) @ kernel.astype(dtype) + bias.astype(dtype)
    return y.reshape(batch_shape + self.out_shape)


def _normalize(x):
  centered = x - x.mean(-1, keepdims=True)
  inv_std = jax.lax.rsqrt(jnp.square(centered).mean(-1, keepdims=True) + LAYER_NORM_EPS)
  return centered * inv_std, inv_std


@jax.custom_vjp
def layer_norm(x, scale, bias):
  """(x - mean) / sqrt(var + eps) * scale + bias over the last axis of a float32 x."""
  return _normalize(x)[0] * scale + bias


def _layer_norm_forward(x, scale, bias):
  normalized, inv_std = _normalize(x)
  return normalized * scale + bias, (normalized, inv_std, scale)


def _layer_norm_backward(residuals, d_y):
  # The textbook gradient from the normalized input and 1/std: two arrays kept per LayerNorm, where autodiff
  # keeps the centered input, its square and more.
  normalized, inv_std, scale = residuals
  d_normalized = d_y * scale
  d_x = inv_std * (d_normalized - d_normalized.mean(-1, keepdims=True)
                   - normalized * (d_normalized * normalized).mean(-1, keepdims=True))
  reduce = tuple(range(d_y.ndim - 1))
  return d_x, jnp.sum(d_y * normalized, reduce), jnp.sum(d_y, reduce)


layer_norm.defvjp(_layer_norm_forward, _layer_norm_backward)


class LayerNorm(nn.Module):
  """LayerNorm over the last axis, statistics in float32, optionally one of stacked copies."""
  config: ModelConfig
  axis_name: str
  copies: int = 1

  @nn.compact
  def __call__(self, x, copy=None):
    features = x.shape[-1]
    scale = _layer_param(self, 'scale', nn.initializers.ones, (features,), (self.axis_name,), self.copies, copy)
    bias = _layer_param(self, 'bias', nn.initializers.zeros, (features,), (self.axis_name,), self.copies, copy)
    return layer_norm(x.astype(jnp.float32), scale, bias).astype(jnp.dtype(self.config.dtype))


class Embeddings(nn.Module):
  """Word, position and token-type embeddings in E space, then LayerNorm and dropout (still in E space)."""
  config: ModelConfig
  deterministic: bool = True

  def setup(self):
    cfg, init = self.config, initializer(self.config)
    param_dtype = jnp.dtype(cfg.param_dtype)
    self.word_embeddings = self.param(
        'word_embeddings', nn.with_logical_partitioning(init, ('vocab', 'embedding')),
        (cfg.vocab_size, cfg.embedding_size), param_dtype)
    self.position_embeddings = self.param(
        'position_embeddings', nn.with_logical_partitioning(init, (None, 'embedding')),
        (cfg.max_position_embeddings, cfg.embedding_size), param_dtype)
    self.token_type_embeddings = self.param(
        'token_type_embeddings', nn.with_logical_partitioning(init, (None, 'embedding')),
        (cfg.type_vocab_size, cfg.embedding_size), param_dtype)
    self.layer_norm = LayerNorm(cfg, 'embedding')
    self.dropout = nn.Dropout(cfg.dropout_rate)

  def __call__(self, input_ids, token_type_ids):
    length = input_ids.shape[1]
    x = (jnp.take(self.word_embeddings, input_ids, axis=0)
         + jnp.take(self.token_type_embeddings, token_type_ids, axis=0)
         + self.position_embeddings[None, :length])
    x = self.layer_norm(x)
    return self.dropout(x, deterministic=self.deterministic)

  def attend(self, x):
    """Logits against the word embeddings: the tied MLM decoder."""
    dtype = jnp.dtype(self.config.dtype)
    return jnp.einsum('...e,ve->...v', x.astype(dtype), self.word_embeddings.astype(dtype))


def _attention_probs(q, k, mask_bias):
  return jax.nn.softmax(jnp.einsum('bnqd,bnkd->bnqk', q, k).astype(jnp.float32) + mask_bias, axis=-1)


def _attention_context(probs, v):
  return jnp.einsum('bnqk,bnkd->bnqd', probs.astype(v.dtype), v)


@jax.custom_vjp
def attend(q, k, v, mask_bias):
  """softmax(q kᵀ + mask_bias) v for [batch, heads, length, head_dim] operands, q already scaled by 1/√head_dim.

  The gradient is written out as flash attention does: dv = pᵀ do, ds = p ∘ (do vᵀ − rowsum(do ∘ out)),
  dq = ds k, dk = dsᵀ q. It keeps q, k, v, the probabilities and the output for the backward pass; autodiff of
  the softmax keeps more arrays of the size of the probabilities and makes more passes over them, which on
  XLA:CPU, where each such pass is a trip through memory, made the block's backward pass 7x its forward."""
  return _attention_context(_attention_probs(q, k, mask_bias), v)


def _attend_forward(q, k, v, mask_bias):
  probs = _attention_probs(q, k, mask_bias)
  out = _attention_context(probs, v)
  return out, (q, k, v, probs, out, mask_bias)


def _attend_backward(residuals, d_out):
  q, k, v, probs, out, mask_bias = residuals
  d_v = jnp.einsum('bnqk,bnqd->bnkd', probs.astype(d_out.dtype), d_out)
  d_probs = jnp.einsum('bnqd,bnkd->bnqk', d_out, v).astype(jnp.float32)
  row_dot = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1, keepdims=True)
  d_scores = (probs * (d_probs - row_dot)).astype(q.dtype)
  d_q = jnp.einsum('bnqk,bnkd->bnqd', d_scores, k)
  d_k = jnp.einsum('bnqk,bnqd->bnkd', d_scores, q)
  return d_q, d_k, d_v, jnp.zeros_like(mask_bias)  # the mask is data, not a parameter


attend.defvjp(_attend_forward, _attend_backward)


def cudnn_attend(q, k, v, lengths):
  """cuDNN's fused attention for [batch, length, heads, head_dim] operands (q not scaled: the kernel scales by
  1/√head_dim). Padding goes in as each row's length, which cuDNN masks itself and skips; a boolean mask or an
  additive bias would become a dense bias whose gradient is always computed (jax#28974, jax#32242). Right padding
  only, as every batch albert_jax makes; padded query rows come out as zeros."""
  return jax.nn.dot_product_attention(q, k, v, query_seq_lengths=lengths, key_value_seq_lengths=lengths,
                                      implementation='cudnn')


@functools.cache
def cudnn_attention_compiles(head_dim: int, dtype: str) -> bool:
  """Whether cuDNN's fused attention, forward and backward, compiles on this GPU for this head size and dtype: a
  cuDNN without a plan for it (jax#32430: CUDA 13) makes 'auto' fall back to XLA instead of failing the run."""
  x = jax.ShapeDtypeStruct((2, 128, 2, head_dim), jnp.dtype(dtype))
  lengths = jax.ShapeDtypeStruct((2,), jnp.int32)
  loss = lambda q, k, v, n: cudnn_attend(q, k, v, n).astype(jnp.float32).sum()
  try:
    jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(x, x, x, lengths).compile()
    return True
  except Exception as e:  # pylint: disable=broad-except  (XLA and cuDNN raise several kinds)
    logging.warning("model.attention 'auto': cuDNN's fused attention does not compile here (%s); using XLA's.",
                    ' '.join(str(e).split())[:300])
    return False


class SelfAttention(nn.Module):
  """Multi-head self-attention, output projection, residual, post-LayerNorm."""
  config: ModelConfig
  copies: int = 1
  deterministic: bool = True

  @nn.compact
  def __call__(self, x, copy, padding):
    """padding: what `padding_for` made of the attention mask for this config's attention."""
    cfg = self.config
    heads = (cfg.num_heads, cfg.head_dim)
    project_in = lambda name: Dense(cfg, (cfg.hidden_size,), heads, 'hidden', 'heads', self.copies,
                                    name=name)(x, copy)
    if cfg.attention == 'cudnn':  # [batch, length, heads, head_dim] as the projections make them
      context = cudnn_attend(*(project_in(name) for name in ('query', 'key', 'value')), padding)
    else:
      # [batch, heads, length, head_dim]: batch-major operands, which XLA:CPU multiplies ~4x faster than the
      # [batch, length, heads, head_dim] layout the projections produce (TPUs do not mind either way).
      q, k, v = (jnp.swapaxes(project_in(name), 1, 2) for name in ('query', 'key', 'value'))
      q = q / jnp.asarray(math.sqrt(cfg.head_dim), q.dtype)  # on q: [.., head_dim] is smaller than the scores
      if self.deterministic or cfg.attention_dropout_rate == 0:
        context = attend(q, k, v, padding)
      else:  # dropout on the probabilities: autodiff's gradient
        probs = nn.Dropout(cfg.attention_dropout_rate)(_attention_probs(q, k, padding), deterministic=False)
        context = _attention_context(probs, v)
      context = jnp.swapaxes(context, 1, 2)
    out = Dense(cfg, heads, (cfg.hidden_size,), 'heads', 'hidden', self.copies, name='output')(context, copy)
    out = nn.Dropout(cfg.dropout_rate)(out, deterministic=self.deterministic)
    return LayerNorm(cfg, 'hidden', self.copies, name='layer_norm')(x + out, copy)


class FeedForward(nn.Module):
  """H -> intermediate -> activation -> H, residual, post-LayerNorm."""
  config: ModelConfig
  copies: int = 1
  deterministic: bool = True

  @nn.compact
  def __call__(self, x, copy):
    cfg = self.config
    h = Dense(cfg, (cfg.hidden_size,), (cfg.intermediate_size,), 'hidden', 'mlp', self.copies,
              name='intermediate')(x, copy)
    h = ACTIVATIONS[cfg.hidden_act](h)
    h = nn.with_logical_constraint(h, ('batch', 'length', 'act_mlp'))
    out = Dense(cfg, (cfg.intermediate_size,), (cfg.hidden_size,), 'mlp', 'hidden', self.copies,
                name='output')(h, copy)
    out = nn.Dropout(cfg.dropout_rate)(out, deterministic=self.deterministic)
    return LayerNorm(cfg, 'hidden', self.copies, name='layer_norm')(x + out, copy)


class Block(nn.Module):
  """One transformer block; the scan body. Returns (carry, None) as nn.scan expects."""
  config: ModelConfig
  deterministic: bool = True

  @nn.compact
  def __call__(self, x, block_index, padding):
    cfg = self.config
    attention_copies, ffn_copies = cfg.attention_copies, cfg.ffn_copies
    x = SelfAttention(cfg, attention_copies, self.deterministic, name='attention')(
        x, cfg.block_copy(block_index, attention_copies), padding)
    x = FeedForward(cfg, ffn_copies, self.deterministic, name='ffn')(x, cfg.block_copy(block_index, ffn_copies))
    x = nn.with_logical_constraint(x, ('batch', 'length', 'act_hidden'))
    return x, None


class Encoder(nn.Module):
  """E -> H projection (when E != H), then num_layers * inner_group_num applications of the shared block."""
  config: ModelConfig
  deterministic: bool = True

  @nn.compact
  def __call__(self, x, padding):
    cfg = self.config
    if cfg.embedding_size != cfg.hidden_size or cfg.embedding_projection:
      x = Dense(cfg, (cfg.embedding_size,), (cfg.hidden_size,), 'embedding', 'hidden',
                name='embedding_projection')(x)
    x = nn.with_logical_constraint(x, ('batch', 'length', 'act_hidden'))
    block = Block
    if REMAT_POLICIES[cfg.remat] is not None:
      # prevent_cse=False is safe (and faster) inside scan, whose loop already stops the CSE remat guards against.
      # (With the loop unrolled remat saved nothing on XLA:CPU, guard or not: hence for_platform keeps it rolled.)
      block = nn.remat(Block, prevent_cse=False, policy=REMAT_POLICIES[cfg.remat])
    blocks = nn.scan(block, variable_broadcast='params', split_rngs={'params': False, 'dropout': True},
                     in_axes=(0, nn.broadcast), length=cfg.num_blocks,
                     unroll=min(cfg.scan_unroll, cfg.num_blocks))
    x, _ = blocks(cfg, self.deterministic, name='block')(x, jnp.arange(cfg.num_blocks), padding)
    return x


class MLMHead(nn.Module):
  """Dense H -> E, activation, LayerNorm, then logits against the tied word embeddings plus an output bias."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x, embeddings: Embeddings):
    cfg = self.config
    x = Dense(cfg, (cfg.hidden_size,), (cfg.embedding_size,), 'hidden', 'embedding', name='transform')(x)
    x = ACTIVATIONS[cfg.hidden_act](x)
    x = LayerNorm(cfg, 'embedding', name='layer_norm')(x)
    bias = self.param('output_bias', nn.with_logical_partitioning(nn.initializers.zeros, ('vocab',)),
                      (cfg.vocab_size,), jnp.dtype(cfg.param_dtype))
    return add_bias(embeddings.attend(x), bias.astype(jnp.dtype(cfg.dtype))).astype(jnp.float32)


def padding_for(cfg: ModelConfig, attention_mask):
  """The attention mask (int [batch, length], 1 = real token) as the attention takes it: for XLA's, an additive
  [batch, 1, 1, key] bias of -10000 on padded keys (the original's); for cuDNN's, each row's length."""
  if cfg.attention == 'cudnn':
    return attention_mask.sum(-1, dtype=jnp.int32)
  return ((1.0 - attention_mask.astype(jnp.float32)) * MASK_BIAS)[:, None, None, :]


def backbone(cfg: ModelConfig, input_ids, token_type_ids, attention_mask, deterministic: bool,
             pool: bool = True) -> tuple:
  """(embeddings module, sequence_output, pooled_output): the encoder every head sits on. Called inside a
  module's compact method, it creates the submodules `embeddings`, `encoder` and `pooler` there, so that the
  pretraining model and the downstream models (downstream/heads.py) share one parameter layout. Span heads use
  no pooler (pool=False: none is made, as HF's AlbertForQuestionAnswering has none).

  input_ids, token_type_ids, attention_mask: int [batch, length]; attention_mask 1 = real token.
  """
  if token_type_ids is None:
    token_type_ids = jnp.zeros_like(input_ids)
  if attention_mask is None:
    attention_mask = jnp.ones_like(input_ids)
  if input_ids.shape[1] > cfg.max_position_embeddings:
    raise ValueError(f'sequence length {input_ids.shape[1]} exceeds model.max_position_embeddings '
                     f'{cfg.max_position_embeddings}.')
  if cfg.attention == 'auto' or cfg.scan_unroll == 0:  # train, finetune and aot resolve these for their mesh first
    cfg = cfg.for_platform(jax.default_backend())
  embeddings = Embeddings(cfg, deterministic, name='embeddings')
  sequence_output = Encoder(cfg, deterministic, name='encoder')(embeddings(input_ids, token_type_ids),
                                                                padding_for(cfg, attention_mask))
  if not pool:
    return embeddings, sequence_output, None
  pooled_output = jnp.tanh(Dense(cfg, (cfg.hidden_size,), (cfg.hidden_size,), 'hidden', 'hidden_out',
                                 name='pooler')(sequence_output[:, 0]))
  return embeddings, sequence_output, pooled_output


class Albert(nn.Module):
  """ALBERT for pretraining: encoder, tanh pooler on [CLS], MLM head and sentence-order head."""
  config: ModelConfig

  @nn.compact
  def __call__(self, input_ids, token_type_ids=None, attention_mask=None, masked_lm_positions=None,
               deterministic: bool = True) -> AlbertOutput:
    """input_ids, token_type_ids, attention_mask: int [batch, length]; attention_mask 1 = real token.

    masked_lm_positions: optional int [batch, predictions]; MLM logits are computed only there (the original
    does the same), otherwise at every position.
    """
    cfg = self.config
    embeddings, sequence_output, pooled_output = backbone(cfg, input_ids, token_type_ids, attention_mask,
                                                          deterministic)
    sop_logits = Dense(cfg, (cfg.hidden_size,), (2,), 'hidden', None, name='sop_head')(
        pooled_output).astype(jnp.float32)

    masked = sequence_output
    if masked_lm_positions is not None:
      masked = jnp.take_along_axis(sequence_output, masked_lm_positions[..., None], axis=1)
    mlm_logits = MLMHead(cfg, name='mlm_head')(masked, embeddings)
    return AlbertOutput(sequence_output=sequence_output, pooled_output=pooled_output,
                        mlm_logits=mlm_logits, sop_logits=sop_logits)


def init_params(model: Albert, rng: jax.Array, seq_len: int = 8) -> Any:
  """Parameters (boxed with their logical axis names) for `model`, from a dummy batch of one sequence."""
  ids = jnp.zeros((1, min(seq_len, model.config.max_position_embeddings)), jnp.int32)
  return model.init({'params': rng}, ids, masked_lm_positions=jnp.zeros((1, 1), jnp.int32))['params']


def abstract_params(model: Albert) -> Any:
  """The shapes and dtypes of `init_params` without allocating anything."""
  return jax.eval_shape(lambda rng: init_params(model, rng), jax.random.key(0))
