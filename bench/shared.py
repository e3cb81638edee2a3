"""What the benches share, so that each measures the same way and none imports another: a random pretraining batch
and the labels HF's pretraining head wants for it, HF's pretraining model and its loss (stock, or at the masked
positions alone), torch's matmul rate (JAX's is metrics.measured_matmul_flops), steps timed in alternating blocks
with the machine's load recorded, a profiler trace's events, a run's TensorBoard scalars, and the downstream
benches' GLUE settings.
"""
import gzip
import json
import os
import pathlib
import statistics
import tempfile
import time

import flax.linen as nn
import jax
import numpy as np

from albert_jax import finetune, interop, paths, sharding
from albert_jax.metrics import tensorboard_scalars  # noqa: F401  (the benches read runs' scalars from here)
from albert_jax import step as step_lib
from albert_jax.config import from_file, validate_finetune
from albert_jax.model import RUNTIME_FIELDS, ModelConfig

REPO = pathlib.Path(__file__).resolve().parent.parent

# The downstream benches' tasks: the config file, the sequence length (SST-2's sentences are short: 64 keeps 99%
# whole), the schedule lengths of the grid, and the metrics reported (the first picks settings and checkpoints, as
# the config does).
GLUE_TASKS = {'sst2': {'config': 'configs/finetune/sst2.py', 'max_seq_length': 64, 'steps': '1000',
                       'metrics': ('accuracy',)},
              'mrpc': {'config': 'configs/finetune/mrpc.py', 'max_seq_length': 128, 'steps': '500',
                       'metrics': ('accuracy', 'f1')}}


def glue_task_config(task: str, folder: str):
  """The task's config file, reading the GLUE folder, with no test predictions and the bench's sequence length."""
  config = from_file(REPO / GLUE_TASKS[task]['config'])
  config.task.update(data=folder, test_predictions=False, max_seq_length=GLUE_TASKS[task]['max_seq_length'])
  return config


def random_batch(batch: int, seq_len: int, predictions: int, vocab: int) -> dict:
  """A pretraining batch of random pieces (seeded): two segments, `predictions` masked positions a row."""
  rng = np.random.default_rng(0)
  positions = np.sort(np.stack([rng.choice(np.arange(1, seq_len - 1), predictions, replace=False)
                                for _ in range(batch)]), axis=1).astype(np.int32)
  segment_ids = np.zeros((batch, seq_len), np.int32)
  segment_ids[:, seq_len // 2:] = 1
  return {'input_ids': rng.integers(5, vocab, (batch, seq_len)).astype(np.int32), 'segment_ids': segment_ids,
          'input_mask': np.ones((batch, seq_len), np.int32), 'masked_lm_positions': positions,
          'masked_lm_ids': rng.integers(5, vocab, (batch, predictions)).astype(np.int32),
          'masked_lm_weights': np.ones((batch, predictions), np.float32),
          'sentence_order_labels': rng.integers(0, 2, batch).astype(np.int32)}


def fine_tuning(task: str, pretraining_config, batch_size: int = None, seq_len: int = None,
                scan_unroll: int = None) -> tuple:
  """(config, finetune's Task, the model's shape, a batch): the GLUE task's config (its batch, optimizer and
  classifier dropout; no other dropout, as HF's arms) around a copy of the pretraining config's model, and a
  random batch (seeded) of `batch_size` (default: the task's) full rows of `seq_len` pieces (default: the bench's
  length for the task), for timing the fine-tuning step; no data is read. `scan_unroll` overrides the fine-tuning
  config's, as --config.model.scan_unroll does finetune.py's."""
  config = glue_task_config(task, folder='unread')
  # The pretraining model's shape with the fine-tuning config's runtime fields (scan_unroll, remat, ...), as
  # finetune.py takes them when it starts from a pretraining run.
  runtime = {k: config.model[k] for k in RUNTIME_FIELDS}
  config.model = pretraining_config.model.copy_and_resolve_references()
  config.model.update(**runtime)
  if scan_unroll is not None:
    config.model.scan_unroll = scan_unroll
  seq_len = config.task.max_seq_length = seq_len or config.task.max_seq_length
  config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0,
                      max_position_embeddings=max(config.model.max_position_embeddings, seq_len))
  shape = ModelConfig.from_config(config.model)
  validate_finetune(config, shape)
  task = finetune.make_task(config)
  rows, rng = batch_size or config.train.batch_size, np.random.default_rng(0)
  batch = {'input_ids': rng.integers(5, shape.vocab_size, (rows, seq_len)).astype(np.int32),
           'segment_ids': np.zeros((rows, seq_len), np.int32), 'input_mask': np.ones((rows, seq_len), np.int32),
           'label_ids': rng.integers(0, task.num_labels, rows).astype(np.int32), 'weights': np.ones(rows, np.float32)}
  return config, task, shape, batch


def hf_classifier(shape, task, batch: dict) -> tuple:
  """(HF's AlbertForSequenceClassification of `shape` with the task's labels and classifier dropout, HF's own
  initialisation, no other dropout; () -> its loss on our `batch`)."""
  import torch
  import transformers
  config = hf_pretraining_model(shape).config
  config.update({'num_labels': task.head['num_labels'], 'classifier_dropout_prob': task.head['classifier_dropout']})
  hf = transformers.AlbertForSequenceClassification(config)
  long = lambda x: torch.as_tensor(np.asarray(x), dtype=torch.long)
  inputs = {'input_ids': long(batch['input_ids']), 'token_type_ids': long(batch['segment_ids']),
            'attention_mask': long(batch['input_mask']), 'labels': long(batch['label_ids'])}
  return hf, lambda: hf(**inputs).loss


def hf_arm(shape, batch: dict, task=None, masked_only: bool = False) -> tuple:
  """(HF's model, () -> its loss on our `batch`): with a finetune Task its classifier (hf_classifier), else its
  pretraining model, stock or with the MLM head at the masked positions alone (hf_pretraining_loss)."""
  if task:
    return hf_classifier(shape, task, batch)
  hf = hf_pretraining_model(shape)
  return hf, hf_pretraining_loss(hf, batch, masked_only)


def hf_mlm_labels(batch: dict) -> np.ndarray:
  """HF's MLM labels for our batch: the masked piece at each masked position of weight > 0, -100 (no loss)
  everywhere else."""
  labels = np.full(batch['input_ids'].shape, -100, np.int64)
  weighted = np.asarray(batch['masked_lm_weights']) > 0
  rows = np.nonzero(weighted)[0]
  labels[rows, np.asarray(batch['masked_lm_positions'])[weighted]] = np.asarray(batch['masked_lm_ids'])[weighted]
  return labels


def hf_pretraining_model(shape, params=None):
  """HF's pretraining model of `shape` (a ModelConfig) without dropout, as ours is timed: AlbertForPreTraining, or
  BertForPreTraining for a shape that shares nothing (the BERT configs); with our `params` (ALBERT: through
  interop's HF export, what `convert --to=hf` writes), or HF's own initialisation."""
  import transformers
  no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  if params is not None:
    with tempfile.TemporaryDirectory() as folder:
      interop.save_hf(folder, params, shape)
      return transformers.AlbertForPreTraining.from_pretrained(folder, classifier_dropout_prob=0.0, **no_dropout)
  common = dict(vocab_size=shape.vocab_size, hidden_size=shape.hidden_size, num_hidden_layers=shape.num_layers,
                num_attention_heads=shape.num_heads, intermediate_size=shape.intermediate_size,
                hidden_act={'gelu': 'gelu_new', 'gelu_exact': 'gelu'}.get(shape.hidden_act, shape.hidden_act),
                max_position_embeddings=shape.max_position_embeddings, type_vocab_size=shape.type_vocab_size,
                attn_implementation='sdpa', **no_dropout)
  if shape.sharing == 'none':
    return transformers.BertForPreTraining(transformers.BertConfig(**common))
  return transformers.AlbertForPreTraining(transformers.AlbertConfig(
      embedding_size=shape.embedding_size, num_hidden_groups=shape.num_groups, inner_group_num=shape.inner_group_num,
      classifier_dropout_prob=0.0, **common))


def hf_pretraining_loss(hf, batch: dict, masked_only: bool):
  """() -> HF's pretraining loss on our batch (MLM over the masked pieces + SOP). Stock (`masked_only` False) HF's
  head computes the vocabulary's logits at every position, as an HF user's model does; `masked_only` runs the same
  modules with the MLM head at the masked positions alone, as ours does: the same work, so that the two
  implementations can be compared at it."""
  import torch
  long = lambda x: torch.as_tensor(np.asarray(x), dtype=torch.long)
  inputs = {'input_ids': long(batch['input_ids']), 'token_type_ids': long(batch['segment_ids']),
            'attention_mask': long(batch['input_mask'])}
  order, labels = long(batch['sentence_order_labels']), torch.as_tensor(hf_mlm_labels(batch))
  positions, ids = long(batch['masked_lm_positions']), long(batch['masked_lm_ids'])
  weights = torch.as_tensor(np.asarray(batch['masked_lm_weights'], np.float32)).flatten()

  def loss():
    if not masked_only:
      return hf(**inputs, labels=labels, sentence_order_label=order).loss
    sequence, pooled = hf.albert(**inputs, return_dict=False)[:2]
    gathered = torch.gather(sequence, 1, positions[..., None].expand(-1, -1, sequence.shape[-1]))
    mlm = torch.nn.functional.cross_entropy(hf.predictions(gathered).flatten(0, 1), ids.flatten(), reduction='none')
    sop = torch.nn.functional.cross_entropy(hf.sop_classifier(pooled), order)
    return (mlm * weights).sum() / weights.sum() + sop

  return loss


def time_interleaved(steps_by_name: dict, repeats: int, block: int = 1) -> tuple:
  """({name: median seconds per step}, the machine's 1-minute load average before and after). The steps alternate
  in short blocks so that a machine whose speed drifts (a shared VM) slows both alike; the first step of each
  block is not timed (the other runtime's threads may still be spinning from its last step), the next `block`
  steps are timed together."""
  for step in steps_by_name.values():  # compile and warm up
    step()
  load = {'before': os.getloadavg()[0]}
  times = {name: [] for name in steps_by_name}
  for _ in range(repeats):
    for name, step in steps_by_name.items():
      step()
      start = time.perf_counter()
      for _ in range(block):
        step()
      times[name].append((time.perf_counter() - start) / block)
  load['after'] = os.getloadavg()[0]
  return {name: statistics.median(t) for name, t in times.items()}, load


def program_on_one_device(config, shape, task=None) -> tuple:
  """(program, mesh of this machine's first device): train.py's program (step.build) for `shape`, or with a
  finetune Task the one finetune.py compiles for it (finetune.make_program)."""
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  platform_config = shape.for_platform(jax.devices()[0].platform)
  program = (finetune.make_program(task, platform_config, config.train, mesh) if task
             else step_lib.build(config, platform_config, mesh))
  return program, mesh


def compiled_train_step(program: step_lib.Program, batch: dict, mesh):
  """The program's train step compiled as train.py and finetune.py compile it, for this batch's shapes."""
  abstract_batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=program.batch_sharding)
                    for k, v in batch.items()}
  return step_lib.compile_train_step(program, program.abstract_state(), abstract_batch, mesh)


def train_py_step(program: step_lib.Program, batch: dict, mesh) -> tuple:
  """(step(), XLA's peak bytes for the compiled step or None on a CPU): train.py's program (step.build) or
  finetune.py's (finetune.make_program), compiled as they compile it for this batch's shapes, on a new state;
  step() returns the step's metrics."""
  train_step = compiled_train_step(program, batch, mesh)
  with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
    state = [program.new_state(jax.random.key(0))]
    device_batch = sharding.global_batch(batch, mesh)

  def step() -> dict:
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
      state[0], step_metrics = train_step(state[0], device_batch)
    jax.block_until_ready(state[0])
    return step_metrics

  # XLA:CPU's memory analysis undercounts (train.py); on a GPU it is the step's own need. JAX's allocator keeps one
  # peak for the whole process, which the batch search's failed trials have already pushed to the share.
  cpu = mesh.devices.flat[0].platform == 'cpu'
  peak = None if cpu else getattr(train_step.memory_analysis(), 'peak_memory_in_bytes', None)
  return step, peak


def torch_matmul_flops(size: int = 2048, dtype: str = 'float32', repeats: int = 5, device=None) -> float:
  """FLOP/s of a square matmul in torch on `device` (default: the CPU), queued back to back: JAX's is
  metrics.measured_matmul_flops."""
  import torch
  device = device or torch.device('cpu')
  x = torch.randn(size, size, device=device).to(getattr(torch, dtype))
  sync = torch.cuda.synchronize if device.type == 'cuda' else lambda: None
  torch.mm(x, x)
  sync()
  start = time.perf_counter()
  for _ in range(repeats):
    torch.mm(x, x)
  sync()
  return 2 * size ** 3 * repeats / (time.perf_counter() - start)


def perfetto_events(directory) -> tuple:
  """(the trace file, its events) of the newest Perfetto trace jax.profiler wrote under `directory` (a trace
  taken with create_perfetto_trace=True); (None, []) where there is none."""
  found = sorted(paths.path(directory).glob('plugins/profile/*/perfetto_trace.json.gz'))
  if not found:
    return None, []
  with gzip.open(found[-1].open('rb')) as f:
    data = json.load(f)
  return found[-1], data['traceEvents'] if isinstance(data, dict) else data
