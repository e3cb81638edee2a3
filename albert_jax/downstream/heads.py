"""The fine-tuning models: the pretraining model's backbone (model.backbone: same parameter names, so a
pretrained checkpoint's `embeddings`, `encoder` and `pooler` load as they are) with the original's task heads.

  SequenceClassifier   GLUE and the built-in task: pooled [CLS] -> dropout -> dense to the labels (1 label: STS-B
                       regression). HF AlbertForSequenceClassification's layout: `classifier`.
  MultipleChoice       RACE: [batch, choices, length] inputs, each choice scored as the classifier with 1 label.
                       HF AlbertForMultipleChoice's layout.
  SpanV1               SQuAD 1.1: start and end logits from each token's state, no dropout. HF
                       AlbertForQuestionAnswering's layout: `qa_outputs`.
  SpanV2               SQuAD 2.0, the original's XLNet-style head (squad_utils.create_v2_model): start log-softmax;
                       end conditioned on the start (the gold one in training, a beam of start_n_top at inference);
                       answerability from the start-weighted state and [CLS]. HF has no such head: its
                       AlbertForQuestionAnswering scores a null answer as the [CLS] span of the v1 head.
"""
from typing import Optional

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from albert_jax.errors import CheckpointError
from albert_jax.model import Albert, Dense, LayerNorm, ModelConfig, backbone, initializer

_NEG = -1e30  # the original's mask value for positions that cannot start or end an answer


@flax.struct.dataclass
class DownstreamOutput:
  logits: Optional[jax.Array] = None        # [batch, labels] or [batch, choices]
  start_logits: Optional[jax.Array] = None  # [batch, length]: SpanV1 logits; SpanV2 masked log-probabilities
  end_logits: Optional[jax.Array] = None    # [batch, length]; SpanV2 in training: given the gold start
  cls_logits: Optional[jax.Array] = None    # [batch]: SpanV2's answerability logit (high = no answer)
  # SpanV2 at inference: the beam of start_n_top starts, and for each its end_n_top ends.
  start_top_log_probs: Optional[jax.Array] = None  # [batch, start_n_top]
  start_top_index: Optional[jax.Array] = None
  end_top_log_probs: Optional[jax.Array] = None    # [batch, start_n_top * end_n_top]
  end_top_index: Optional[jax.Array] = None


class SequenceClassifier(nn.Module):
  config: ModelConfig
  num_labels: int
  classifier_dropout: float = 0.1  # the original's hard-coded keep_prob 0.9

  @nn.compact
  def __call__(self, input_ids, token_type_ids=None, attention_mask=None, deterministic: bool = True):
    cfg = self.config
    _, _, pooled = backbone(cfg, input_ids, token_type_ids, attention_mask, deterministic)
    pooled = nn.Dropout(self.classifier_dropout)(pooled, deterministic=deterministic)
    logits = Dense(cfg, (cfg.hidden_size,), (self.num_labels,), 'hidden', None, name='classifier')(pooled)
    return DownstreamOutput(logits=logits.astype(jnp.float32))


class MultipleChoice(nn.Module):
  config: ModelConfig
  classifier_dropout: float = 0.1

  @nn.compact
  def __call__(self, input_ids, token_type_ids=None, attention_mask=None, deterministic: bool = True):
    """Inputs [batch, choices, length], as HF's AlbertForMultipleChoice; logits [batch, choices]."""
    cfg = self.config
    batch, choices, length = input_ids.shape
    flat = lambda x: None if x is None else x.reshape(batch * choices, length)
    _, _, pooled = backbone(cfg, flat(input_ids), flat(token_type_ids), flat(attention_mask), deterministic)
    pooled = nn.Dropout(self.classifier_dropout)(pooled, deterministic=deterministic)
    logits = Dense(cfg, (cfg.hidden_size,), (1,), 'hidden', None, name='classifier')(pooled)
    return DownstreamOutput(logits=logits.reshape(batch, choices).astype(jnp.float32))


class SpanV1(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, input_ids, token_type_ids=None, attention_mask=None, deterministic: bool = True):
    cfg = self.config
    _, sequence, _ = backbone(cfg, input_ids, token_type_ids, attention_mask, deterministic, pool=False)
    logits = Dense(cfg, (cfg.hidden_size,), (2,), 'hidden', None, name='qa_outputs')(sequence).astype(jnp.float32)
    return DownstreamOutput(start_logits=logits[..., 0], end_logits=logits[..., 1])


class SpanV2(nn.Module):
  """p_mask: [batch, length], 1 where an answer cannot start or end (query, [SEP], padding); 0 for [CLS] and the
  context. In training, `start_positions` [batch] conditions the end on the gold start."""
  config: ModelConfig
  start_n_top: int = 5
  end_n_top: int = 5
  answer_dropout: float = 0.1

  @nn.compact
  def __call__(self, input_ids, token_type_ids=None, attention_mask=None, p_mask=None, start_positions=None,
               deterministic: bool = True):
    cfg = self.config
    _, h, _ = backbone(cfg, input_ids, token_type_ids, attention_mask, deterministic, pool=False)
    h = h.astype(jnp.float32)
    p_mask = jnp.zeros(input_ids.shape, jnp.float32) if p_mask is None else p_mask.astype(jnp.float32)
    masked = lambda logits, mask: logits * (1 - mask) + _NEG * mask
    start_logits = masked(_dense(cfg, 1, 'start_logits')(h)[..., 0], p_mask)
    start_log_probs = jax.nn.log_softmax(start_logits, -1)
    end_dense_0 = _dense(cfg, cfg.hidden_size, 'end_logits_dense_0')
    end_norm = LayerNorm(cfg, 'hidden', name='end_logits_layer_norm')
    end_dense_1 = _dense(cfg, 1, 'end_logits_dense_1')

    def end_logits_given(start_states):  # start_states [batch, length, ..., H] -> logits [batch, length, ...]
      tiled = jnp.broadcast_to(h.reshape(h.shape[:2] + (1,) * (start_states.ndim - 3) + h.shape[-1:]),
                               start_states.shape)
      x = jnp.tanh(end_dense_0(jnp.concatenate([tiled, start_states], -1)))
      return end_dense_1(end_norm(x).astype(jnp.float32))[..., 0]

    out = {}
    if start_positions is not None:  # training: the gold start
      start_state = jnp.take_along_axis(h, start_positions[:, None, None], axis=1)  # [batch, 1, H]
      end_logits = end_logits_given(jnp.broadcast_to(start_state, h.shape))
      out.update(start_logits=start_log_probs, end_logits=jax.nn.log_softmax(masked(end_logits, p_mask), -1))
    else:  # inference: the beam
      start_top_log_probs, start_top_index = jax.lax.top_k(start_log_probs, self.start_n_top)
      start_states = jnp.take_along_axis(h, start_top_index[..., None], axis=1)  # [batch, k, H]
      states = jnp.broadcast_to(start_states[:, None], (h.shape[0], h.shape[1]) + start_states.shape[1:])
      end_logits = end_logits_given(states).transpose(0, 2, 1)  # [batch, k, length]
      end_log_probs = jax.nn.log_softmax(masked(end_logits, p_mask[:, None]), -1)
      end_top_log_probs, end_top_index = jax.lax.top_k(end_log_probs, self.end_n_top)
      batch = h.shape[0]
      out.update(start_logits=start_log_probs, start_top_log_probs=start_top_log_probs,
                 start_top_index=start_top_index,
                 end_top_log_probs=end_top_log_probs.reshape(batch, -1),
                 end_top_index=end_top_index.reshape(batch, -1))

    # Answerability: [CLS] and the start-probability-weighted state; no dependence on the end, so one logit each.
    start_feature = jnp.einsum('bl,blh->bh', jax.nn.softmax(start_logits, -1), h)
    x = jnp.tanh(_dense(cfg, cfg.hidden_size, 'answer_class_dense_0')(jnp.concatenate([start_feature, h[:, 0]],
                                                                                        -1)))
    x = nn.Dropout(self.answer_dropout)(x, deterministic=deterministic)
    cls_logits = nn.Dense(1, use_bias=False, kernel_init=initializer(cfg), name='answer_class_dense_1')(x)[..., 0]
    return DownstreamOutput(cls_logits=cls_logits.astype(jnp.float32), **out)


def _dense(cfg: ModelConfig, features: int, name: str) -> nn.Module:
  """A float32 head layer over the last axis (its input width found at first call)."""
  return nn.Dense(features, kernel_init=initializer(cfg), name=name)


def make_model(cfg: ModelConfig, head: Optional[dict] = None) -> nn.Module:
  """The pretraining model, or the downstream model `head` describes: {'architecture': an HF class name or
  'AlbertForSquadV2', 'num_labels': ..., 'classifier_dropout': ...} (config.head of a fine-tuned checkpoint)."""
  if not head:
    return Albert(cfg)
  arch, dropout = head['architecture'], head.get('classifier_dropout', 0.1)
  if arch == 'AlbertForSequenceClassification':
    return SequenceClassifier(cfg, head['num_labels'], dropout)
  if arch == 'AlbertForMultipleChoice':
    return MultipleChoice(cfg, dropout)
  if arch == 'AlbertForQuestionAnswering':
    return SpanV1(cfg)
  if arch == 'AlbertForSquadV2':
    return SpanV2(cfg, head.get('start_n_top', 5), head.get('end_n_top', 5), dropout)
  raise CheckpointError(f'architecture {arch!r} is not one albert_jax builds; known: AlbertForPreTraining, '
                        'AlbertForSequenceClassification, AlbertForMultipleChoice, AlbertForQuestionAnswering, '
                        'AlbertForSquadV2.')
