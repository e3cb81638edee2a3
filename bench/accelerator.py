"""The paper's speed table on this machine's accelerator: albert_jax's training step against HF transformers'.

  python bench/accelerator.py [--configs=base,xxlarge] [--seq_lens=512,128] [--attention=xla,cudnn] [--batch=N]
      [--torch_compile=auto|on|off] [--[no-]check_attention] [--out=/tmp/albert_jax_bench]
  python bench/accelerator.py --smoke    # the same code at tiny shapes, about half a minute on a 2-core CPU

For each config (ALBERT base, large, xlarge, xxlarge; BERT base, large, xlarge), sequence length and attention
implementation, on JAX's default device: ours is exactly the step `python -m albert_jax.train` runs (step.build on a
one-device mesh, compiled by step_lib.compile_train_step; LAMB as configured; bfloat16 compute and float32 parameters on
an accelerator), HF's is AlbertForPreTraining (ALBERT configs) or BertForPreTraining (BERT configs: no sharing) with
SDPA attention, AdamW (fused on CUDA), bfloat16 autocast on CUDA and torch.compile where it works, on the same
device. Both train on the same batch (the config's masked positions per sequence), their steps alternating in
blocks in this one process (shared.time_interleaved), the machine's load recorded beside each row.

No dropout on either side (hidden and attention dropout 0, the BERT configs' 0.1 included): the released ALBERT v2
uses none, dropout costs both frameworks the same elementwise work, and cuDNN's fused attention has none.

The frameworks share one GPU: JAX allocates on demand up to its share (XLA_CLIENT_MEM_FRACTION, set before JAX
starts) and torch is capped at the same share. The batch is the largest per device that fits both (doubling, then
bisecting to within an eighth; one trial step of each per candidate) unless --batch sets it. MFU counts the same
model FLOPs for both (summary.training_flops_per_sequence: the MLM head at the masked positions only; HF's heads
compute MLM logits at every position, work it does beyond that count), against the device's dense bf16 peak and
against each framework's own matmul rate measured in this run.

After the table: the paper's Table 3 speedup column measured here (sequences/s at the first of --seq_lens relative
to BERT-xlarge's, ours and HF's, beside the paper's); the targets as met or missed (ALBERT-xxlarge at 512: 50% MFU
of the bf16 peak and 1.3x HF's tokens/s; ALBERT-base: 1.3x); on a GPU, --check_attention: XLA's attention against
cuDNN's on the same parameters and a padded batch (logits and every gradient). Writes accelerator.json (every
figure, the versions, the date) and accelerator.md (what is printed at the end) under --out. Imports no TensorFlow.
Needs the [hf] extra.
"""
import os

MEMORY_SHARE = 0.45  # of the GPU's memory, for each framework
# Before JAX starts: without these it would take 75% of the GPU at its first operation and leave torch too little.
# A share the user set wins.
os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
if not (os.environ.get('XLA_CLIENT_MEM_FRACTION') or os.environ.get('XLA_PYTHON_CLIENT_MEM_FRACTION')):
  os.environ['XLA_CLIENT_MEM_FRACTION'] = str(MEMORY_SHARE)

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
from typing import Callable, Optional  # noqa: E402

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jaxlib  # noqa: E402
import numpy as np  # noqa: E402
from etils import epath  # noqa: E402

from albert_jax import accelerators, metrics, sharding  # noqa: E402
from albert_jax import model as model_lib  # noqa: E402
from albert_jax import step as step_lib  # noqa: E402
from albert_jax.config import from_file, validate  # noqa: E402
from albert_jax.errors import ConfigError  # noqa: E402
from albert_jax.model import ModelConfig  # noqa: E402
from albert_jax.summary import training_flops_per_sequence  # noqa: E402
from shared import (hf_mlm_labels, hf_pretraining_model, perfetto_events, random_batch, time_interleaved,  # noqa: E402
                    torch_matmul_flops, train_py_step)

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Table 3 of the paper: training throughput relative to BERT-xlarge, sequences of 512.
PAPER_SPEEDUP = {'bert_base': 17.7, 'bert_large': 3.8, 'bert_xlarge': 1.0, 'base': 21.1, 'large': 6.5,
                 'xlarge': 2.4, 'xxlarge': 1.2}
MFU_TARGET, RATIO_TARGET = 0.5, 1.3
TOLERANCE = 0.05  # --check_attention: of each array's largest magnitude (two orders of bfloat16 arithmetic)
HEADER = ('| config | seq | attention | batch | ours s/step | ours tokens/s | HF s/step | HF tokens/s | ours/HF | '
          'ours MFU: peak · matmul | HF MFU: peak · matmul | peak GiB: ours · HF | HF mode |')
SPEEDUP_HEADER = '| config | ours: sequences/s (speedup) | HF: sequences/s (speedup) | paper |'


def say(text: str) -> None:
  print(text, flush=True)  # at once: a full run takes many minutes


def comma_list(text: str) -> list:
  return [x.strip() for x in text.split(',') if x.strip()]


def batch_spec(text: str) -> dict:
  """--batch: 'N' for every row, or a comma list whose items are N, CONFIG:N or CONFIG@SEQ:N, the most specific
  winning. A lent GPU's minutes are too few for the batch search at every shape (each trial compiles both
  frameworks' steps), so a lease names its batches. Returns {(config or None, seq or None): N}."""
  spec = {}
  for item in comma_list(text):
    where, _, number = item.rpartition(':')
    name, _, seq = where.partition('@')
    try:
      spec[name or None, int(seq) if seq else None] = int(number)
    except ValueError:
      raise argparse.ArgumentTypeError(f'{item!r}: want N, CONFIG:N or CONFIG@SEQ:N') from None
  return spec


def batch_for(spec: Optional[dict], name: str, seq_len: int) -> Optional[int]:
  """The batch --batch names for this config and length, or None (search for it)."""
  for key in ((name, seq_len), (name, None), (None, seq_len), (None, None)):
    if spec and key in spec:
      return spec[key]
  return None


@dataclasses.dataclass
class Suite:
  configs: dict  # name -> config
  seq_lens: tuple  # the first is the speedup column's and the xxlarge targets'
  reference: str  # the speedup column's 1.0
  largest: str  # the targets' ALBERT-xxlarge
  smallest: str  # and ALBERT-base


def paper_suite() -> Suite:
  names = ('base', 'large', 'xlarge', 'xxlarge', 'bert_base', 'bert_large', 'bert_xlarge')
  return Suite({name: from_file(str(ROOT / 'configs' / f'{name}.py')) for name in names}, (512, 128),
               'bert_xlarge', 'xxlarge', 'base')


def smoke_suite() -> Suite:
  """Two ALBERT shapes and a BERT shape (E = H, nothing shared) at H 64, from configs/tiny.py."""
  def tiny(**model):
    config = from_file(str(ROOT / 'configs' / 'tiny.py'))
    config.model.update(vocab_size=512, hidden_size=64, intermediate_size=128, num_heads=2, **model)
    return config
  return Suite({'tiny_albert': tiny(embedding_size=32, num_layers=2),
                'tiny_albert_deep': tiny(embedding_size=32, num_layers=4),
                'tiny_bert': tiny(embedding_size=64, num_layers=4, sharing='none')}, (32, 16),
               'tiny_bert', 'tiny_albert_deep', 'tiny_albert')


def bench_config(config, seq_len: int, attention: str, platform: str, scan_unroll: Optional[int] = None):
  """`config` as benched: no dropout, bfloat16 compute on an accelerator, sequences up to seq_len, this attention
  (and blocks per iteration of the encoder's scan, where given)."""
  config = config.copy_and_resolve_references()
  config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0, attention=attention,
                      max_position_embeddings=max(config.model.max_position_embeddings, seq_len))
  if scan_unroll is not None:
    config.model.scan_unroll = scan_unroll
  if platform != 'cpu':
    config.model.dtype = 'bfloat16'
  config.data.max_seq_length = seq_len
  return config


def our_shape(config, platform: str) -> ModelConfig:
  """The model as train.py resolves it for this platform; ConfigError where the attention cannot run here."""
  shape = validate(config).for_platform(platform)
  if shape.attention == 'cudnn' and not model_lib.cudnn_attention_compiles(shape.head_dim, shape.dtype):
    raise ConfigError(f"cuDNN's fused attention does not compile on this GPU for head size {shape.head_dim} "
                      f'(jax#32430)')
  return shape


class HuggingFace:
  """HF's pretraining model (BERT's for a config that shares nothing) and AdamW on a torch device, made once per
  config: neither depends on the batch."""

  def __init__(self, shape: ModelConfig, device):
    import torch
    self.device, self.cuda, self.bert = device, device.type == 'cuda', shape.sharing == 'none'
    self.model = hf_pretraining_model(shape).to(device).train()
    self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01, fused=self.cuda)

  def step(self, batch: dict, compile_it: bool) -> tuple:
    """(step() on `batch`, how it runs: 'torch.compile', 'eager', or 'eager (torch.compile failed: ...)')."""
    import torch
    labels = hf_mlm_labels(batch)
    tensor = lambda x: torch.as_tensor(x, dtype=torch.long, device=self.device)
    inputs = {'input_ids': tensor(batch['input_ids']), 'token_type_ids': tensor(batch['segment_ids']),
              'attention_mask': tensor(batch['input_mask']), 'labels': tensor(labels),
              'next_sentence_label' if self.bert else 'sentence_order_label': tensor(batch['sentence_order_labels'])}
    if compile_it:
      torch._dynamo.reset()  # compile for this shape alone; after a few shapes dynamo would run eagerly
    forward = [torch.compile(self.model, dynamic=False) if compile_it else self.model]

    def step():
      self.optimizer.zero_grad(set_to_none=True)
      with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cuda):
        loss = forward[0](**inputs).loss
      loss.backward()
      self.optimizer.step()
      if self.cuda:
        torch.cuda.synchronize()

    if not compile_it:
      return step, 'eager'
    try:
      step()  # compiles
      return step, 'torch.compile'
    except Exception as e:  # pylint: disable=broad-except  (dynamo and inductor fail in many ways)
      forward[0] = self.model
      torch._dynamo.reset()
      return step, f'eager (torch.compile failed: {type(e).__name__}: {" ".join(str(e).split())[:200]})'


def out_of_memory(e: Exception) -> bool:
  import torch
  return (isinstance(e, (step_lib.OutOfMemory, torch.cuda.OutOfMemoryError)) or
          isinstance(e, jax.errors.JaxRuntimeError) and 'RESOURCE_EXHAUSTED' in str(e))


def release() -> None:
  """Gives back the device memory of what was just dropped, before the next trial or row. Call it outside an
  except block: the exception being handled keeps the failed step's frames, and their arrays, alive."""
  import torch
  gc.collect()
  if torch.cuda.is_available():
    torch.cuda.empty_cache()


def largest_batch(fits: Callable[[int], bool], start: int) -> Optional[int]:
  """The largest batch for which fits(batch), to within an eighth: doubling from `start` (halving while it does not
  fit), then bisecting. None if not even 1 fits."""
  low, high = (start, None) if fits(start) else (None, start)
  while high is None:
    low, high = (2 * low, None) if fits(2 * low) else (low, 2 * low)
  while low is None:
    if high == 1:
      return None
    low, high = (high // 2, high) if fits(high // 2) else (None, high // 2)
  while high - low > max(1, low // 8):
    middle = (low + high) // 2
    low, high = (middle, high) if fits(middle) else (low, middle)
  return low


def trial(programs: dict, hf: HuggingFace, seq_len: int, predictions: int, vocab: int, mesh):
  """fits(batch): one step of HF's and of ours with each attention. HF's is eager, which keeps at least what its
  compiled step does (where the compiled one does not fit after all, HF runs eagerly and its mode says so)."""
  def fits(batch_size: int) -> bool:
    batch = random_batch(batch_size, seq_len, predictions, vocab)
    failed = None
    try:
      hf.step(batch, compile_it=False)[0]()
      release()
      for program in programs.values():
        train_py_step(program, batch, mesh)[0]()
        release()
    except Exception as e:  # pylint: disable=broad-except
      if not out_of_memory(e):
        raise
      failed = type(e).__name__
    release()
    say(f'    batch {batch_size}: ' + (f'out of memory ({failed})' if failed else 'fits'))
    return not failed
  return fits


def figures(step_s: float, batch: int, seq_len: int, flops: float, peak: Optional[float], matmul: float,
            peak_bytes: Optional[int]) -> dict:
  return {'step_s': step_s, 'tokens_per_s': batch * seq_len / step_s, 'examples_per_s': batch / step_s,
          'mfu_peak': flops / step_s / peak if peak else None, 'mfu_matmul': flops / step_s / matmul,
          'peak_memory_bytes': peak_bytes}


def measure(name: str, config, args, env: dict, save: Callable[[list], None]) -> list:
  """The rows of one config: one per sequence length and attention implementation. save(rows so far) after each
  row: a lent GPU's command is killed at its time limit, and what it measured must survive."""
  platform, device, mesh = env['platform'], env['torch_device'], env['mesh']
  seq_lens, attentions = args.seq_lens, args.attention
  programs, rows = {}, []
  for attention in attentions:  # a program serves every batch and sequence length up to the longest
    bench = bench_config(config, max(seq_lens), attention, platform, args.scan_unroll)
    try:
      programs[attention] = step_lib.build(bench, our_shape(bench, platform), mesh)
    except ConfigError as e:
      say(f'  {attention}: not measured: {e}')
      rows += [{'config': name, 'seq_len': s, 'attention': attention, 'skipped': str(e)} for s in seq_lens]
  if not programs:
    return rows
  hf_shape = validate(bench_config(config, max(seq_lens), 'xla', platform))
  hf = HuggingFace(hf_shape, device)
  predictions = config.data.max_predictions_per_seq
  for seq_len in seq_lens:
    named = batch_for(args.batch, name, seq_len)
    if named or args.smoke or platform == 'cpu':
      batch_size = named or (4 if args.smoke else 8)
    else:
      say(f'  at {seq_len}: the largest batch that fits both')
      batch_size = largest_batch(trial(programs, hf, seq_len, predictions, hf_shape.vocab_size, mesh), start=8)
      if batch_size is None:
        rows += [{'config': name, 'seq_len': seq_len, 'attention': a, 'skipped': 'batch 1 does not fit'}
                 for a in programs]
        continue
    batch = random_batch(batch_size, seq_len, predictions, hf_shape.vocab_size)
    flops = training_flops_per_sequence(hf_shape, seq_len, predictions) * batch_size
    hf_step, hf_mode = hf.step(batch, env['torch_compile'])
    say(f'  at {seq_len}: batch {batch_size}; HF runs {hf_mode}')
    for attention, program in programs.items():
      row = {'config': name, 'seq_len': seq_len, 'attention': attention,
             'resolved_attention': program.model.config.attention, 'scan_unroll': program.model.config.scan_unroll,
             'batch': batch_size, 'predictions': predictions,
             'flops_per_step': flops,
             # HF's work beyond the model FLOPs: MLM logits at every position (not counted in its MFU).
             'hf_flops_per_step_with_all_logits':
                 training_flops_per_sequence(hf_shape, seq_len, seq_len) * batch_size}
      rows.append(time_row(row, program, batch, hf_step, hf_mode, args, env))
      save(rows)
    hf_step = None
    release()
  return sorted(rows, key=lambda r: (seq_lens.index(r['seq_len']), attentions.index(r['attention'])))


def time_row(row: dict, program: step_lib.Program, batch: dict, hf_step, hf_mode: str, args, env: dict) -> dict:
  """`row` with both frameworks' figures, their steps timed in alternating blocks; or, where either runs out of
  memory at this batch after all, with the reason it was not measured."""
  import torch
  cuda, flops = env['torch_device'].type == 'cuda', row['flops_per_step']
  batch_size, seq_len = batch['input_ids'].shape
  failed = None
  try:
    our_step, our_peak = train_py_step(program, batch, env['mesh'])
    if cuda:
      torch.cuda.reset_peak_memory_stats()
    seconds, load = time_interleaved({'ours': our_step, 'hf': hf_step}, args.rounds, args.steps)
  except Exception as e:  # pylint: disable=broad-except
    if not out_of_memory(e):
      raise
    failed = f'out of memory at batch {batch_size} ({type(e).__name__}): {" ".join(str(e).split())[:200]}'
  if failed:
    our_step = None
    release()
    say(f'    {row["attention"]}: {failed}')
    return {**row, 'skipped': failed}
  hf_peak = torch.cuda.max_memory_allocated() if cuda else None
  row['ours'] = figures(seconds['ours'], batch_size, seq_len, flops, env['peak'], env['matmul']['jax'], our_peak)
  row['hf'] = {**figures(seconds['hf'], batch_size, seq_len, flops, env['peak'], env['matmul']['torch'], hf_peak),
               'mode': hf_mode}
  row['ratio'], row['load'] = seconds['hf'] / seconds['ours'], load
  say(f'    {row["attention"]}: ours {seconds["ours"]:.4f} s/step, HF {seconds["hf"]:.4f} s/step: '
      f'{row["ratio"]:.2f}x')
  missed = [t for t in targets([row], args.suite, args.seq_lens[0]) if t['met'] is False]
  if args.profile and (missed or args.smoke):  # --smoke profiles every row, to exercise the code
    row['profile'] = profile(our_step, epath.Path(args.profile) / f'{row["config"]}_{seq_len}_{row["attention"]}',
                             seconds['ours'])
    say(f'    profile of ours: {profile_line(row["profile"])}')
  our_step = None
  release()
  return row


PROFILED_STEPS = 3


def profile(step: Callable[[], None], directory: epath.Path, step_s: float) -> dict:
  """Traces PROFILED_STEPS of an already compiled step (jax.profiler, with a Perfetto trace beside XLA's) and sums
  the trace: the device's kernels by name, and how much of the step the device was busy, which tells a step held
  back by its kernels from one held back by the host. On a CPU there are no device events; the host's are summed."""
  try:
    with jax.profiler.trace(str(directory), create_perfetto_trace=True):
      for _ in range(PROFILED_STEPS):
        step()
  except Exception as e:  # pylint: disable=broad-except  (CUPTI may be refused on a machine)
    return {'error': f'{type(e).__name__}: {" ".join(str(e).split())[:300]}'}
  trace, events = perfetto_events(directory)
  if trace is None:
    return {'error': f'no perfetto_trace.json.gz under {directory}'}
  processes = {e['pid']: e.get('args', {}).get('name', '') for e in events
               if e.get('ph') == 'M' and e.get('name') == 'process_name'}
  device = {pid for pid, name in processes.items() if name.startswith('/device:')}
  # Without device events, the host's XLA work (not its Python frames, named '$file:line', nor the tracer's own).
  spans = [e for e in events if e.get('ph') == 'X' and 'dur' in e and
           (e['pid'] in device if device else not e['name'].startswith('$'))]
  by_name = {}
  for e in spans:
    by_name[e['name']] = by_name.get(e['name'], 0.0) + e['dur'] * 1e-6
  busy, end = 0.0, None  # the union of the spans' intervals, in seconds
  for start, stop in sorted((e['ts'] * 1e-6, (e['ts'] + e['dur']) * 1e-6) for e in spans):
    if end is None or start > end:
      busy, end = busy + stop - start, stop
    elif stop > end:
      busy, end = busy + stop - end, stop
  top = sorted(by_name.items(), key=lambda kv: -kv[1])[:20]
  return {'trace': str(trace), 'events': 'device' if device else 'host', 'steps': PROFILED_STEPS,
          'step_s': step_s, 'busy_s_per_step': busy / PROFILED_STEPS,
          'busy_of_step': busy / PROFILED_STEPS / step_s,
          'top': [{'name': name, 's_per_step': t / PROFILED_STEPS, 'of_step': t / PROFILED_STEPS / step_s}
                  for name, t in top]}


def profile_line(p: dict) -> str:
  if 'error' in p:
    return f'failed: {p["error"]}'
  top = '; '.join(f'{t["name"][:60]} {percent(t["of_step"])}' for t in p['top'][:5])
  return f'{p["events"]} busy {percent(p["busy_of_step"])} of the step; top: {top}'


def speedups(rows: list, suite: Suite, seq_len: int) -> Optional[dict]:
  """Sequences/s of each config relative to the reference config's, ours per attention and HF's (the median of its
  measurements at this config), beside the paper's."""
  measured = [r for r in rows if r['seq_len'] == seq_len and 'skipped' not in r]
  reference = [r for r in measured if r['config'] == suite.reference]
  if not reference:
    return None
  hf_rate = {name: statistics.median(r['hf']['examples_per_s'] for r in measured if r['config'] == name)
             for name in dict.fromkeys(r['config'] for r in measured)}
  ours_reference = {r['attention']: r['ours']['examples_per_s'] for r in reference}
  table = {}
  for r in measured:
    name = r['config']
    entry = table.setdefault(name, {'ours': {}, 'ours_examples_per_s': {},
                                    'hf': hf_rate[name] / hf_rate[suite.reference],
                                    'hf_examples_per_s': hf_rate[name], 'paper': PAPER_SPEEDUP.get(name)})
    entry['ours_examples_per_s'][r['attention']] = r['ours']['examples_per_s']
    if r['attention'] in ours_reference:
      entry['ours'][r['attention']] = r['ours']['examples_per_s'] / ours_reference[r['attention']]
  return {'reference': suite.reference, 'seq_len': seq_len, 'configs': table}


def targets(rows: list, suite: Suite, seq_len: int) -> list:
  """The goals, each met or missed; `met` None where it could not be judged, and `note` says why."""
  measured = [r for r in rows if 'skipped' not in r]
  largest = [r for r in measured if r['config'] == suite.largest and r['seq_len'] == seq_len]
  smallest = [r for r in measured if r['config'] == suite.smallest]
  goals = [*((f'{suite.largest} at {seq_len} ({r["attention"]}): MFU of the dense bf16 peak', r['ours']['mfu_peak'],
              MFU_TARGET) for r in largest),
           *((f'{suite.largest} at {seq_len} ({r["attention"]}): tokens/s over HF\'s', r['ratio'], RATIO_TARGET)
             for r in largest),
           *((f'{suite.smallest} at {r["seq_len"]} ({r["attention"]}): tokens/s over HF\'s', r['ratio'], RATIO_TARGET)
             for r in smallest)]
  out = [{'target': what, 'value': value, 'threshold': threshold,
          'met': None if value is None else value >= threshold,
          'note': 'no dense bf16 peak known for this device' if value is None else None}
         for what, value, threshold in goals]
  for name, found in ((f'{suite.largest} at {seq_len}', largest), (suite.smallest, smallest)):
    if not found:
      out.append({'target': name, 'value': None, 'threshold': None, 'met': None, 'note': 'not measured'})
  return out


def padded_batch(batch_size: int, seq_len: int, predictions: int, vocab: int) -> dict:
  """random_batch's batch with rows from a quarter (or room for the masked positions) to all of seq_len long, right
  padded as the pipeline pads, each with its two segments and its masked positions inside its length."""
  batch = random_batch(batch_size, seq_len, predictions, vocab)
  rng = np.random.default_rng(1)
  for row, length in enumerate(np.linspace(max(seq_len // 4, predictions + 2), seq_len, batch_size).astype(int)):
    for name in ('input_ids', 'input_mask', 'segment_ids'):
      batch[name][row, length:] = 0
    batch['segment_ids'][row, :length] = np.arange(length) >= length // 2
    batch['masked_lm_positions'][row] = np.sort(rng.choice(np.arange(1, length - 1), predictions, replace=False))
  return batch


def compare(reference, other, floor: float = 0.0) -> dict:
  """The largest difference, alone and as a share of the reference's largest magnitude, and of what is allowed:
  TOLERANCE of that magnitude, plus `floor`."""
  reference, other = np.asarray(reference, np.float32), np.asarray(other, np.float32)
  scale, max_abs = float(np.abs(reference).max()), float(np.abs(other - reference).max())
  allowed = TOLERANCE * scale + floor
  return {'max_abs': max_abs, 'max_rel': max_abs / scale if scale else None,
          'of_allowed': max_abs / allowed if allowed else None, 'pass': max_abs <= allowed}


def logits_and_gradients(model, params, batch: dict) -> tuple:
  """({'mlm_logits', 'sop_logits'}, the gradients of the training loss)."""
  out = model.apply({'params': params}, batch['input_ids'], batch['segment_ids'], batch['input_mask'],
                    masked_lm_positions=batch['masked_lm_positions'])
  grads = jax.grad(lambda p: step_lib.losses(model, p, batch, jax.random.key(0), 'sop', True)[0])(params)
  return {'mlm_logits': out.mlm_logits, 'sop_logits': out.sop_logits}, grads


def check_attention(suite: Suite, names: list, mesh, seq_lens: tuple = (128, 512), batch_size: int = 8) -> list:
  """XLA's attention against cuDNN's on the same parameters and a padded batch, at each length, for one config of
  each head size: MLM and SOP logits, and every gradient of the training loss, each within TOLERANCE of its largest
  magnitude (gradients with a floor at 1e-3 of the largest gradient of all: the key bias's is zero in exact
  arithmetic and noise in both)."""
  by_head = {}  # the smallest config of each head size: the kernels are what is compared, and it compiles fastest
  for name in sorted(names, key=lambda n: validate(suite.configs[n]).hidden_size):
    by_head.setdefault(validate(suite.configs[name]).head_dim, name)
  results = []
  for head_dim, name in by_head.items():
    config = suite.configs[name]
    if not model_lib.cudnn_attention_compiles(head_dim, 'bfloat16'):
      results.append({'config': name, 'skipped': f"cuDNN's fused attention does not compile here for head size "
                                                  f'{head_dim}'})
      continue
    for seq_len in seq_lens:
      say(f'check_attention: {name} (head size {head_dim}) at {seq_len}')
      # Resolved for the mesh's devices (the loop's unrolling) as train.py does; then each side's attention.
      shape = our_shape(bench_config(config, seq_len, 'xla', 'gpu'), mesh.devices.flat[0].platform)
      models = {a: model_lib.Albert(dataclasses.replace(shape, attention=a)) for a in ('xla', 'cudnn')}
      batch = padded_batch(batch_size, seq_len, config.data.max_predictions_per_seq, shape.vocab_size)
      with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.RULES):
        params = jax.jit(lambda rng: nn.unbox(model_lib.init_params(models['xla'], rng)))(jax.random.key(0))
        got = {a: jax.device_get(jax.jit(lambda p, b, m=m: logits_and_gradients(m, p, b))(params, batch))
               for a, m in models.items()}
      (logits, grads), (cudnn_logits, cudnn_grads) = got['xla'], got['cudnn']
      floor = 1e-3 * max(float(np.abs(np.asarray(g, np.float32)).max()) for g in jax.tree.leaves(grads))
      gradients = {jax.tree_util.keystr(path): compare(g, c, floor) for (path, g), c in
                   zip(jax.tree_util.tree_flatten_with_path(grads)[0], jax.tree.leaves(cudnn_grads))}
      entry = {'config': name, 'seq_len': seq_len, 'batch': batch_size, 'tolerance': TOLERANCE,
               **{k: compare(logits[k], cudnn_logits[k]) for k in logits}, 'gradients': gradients}
      entry['worst_gradient'] = max(gradients, key=lambda k: gradients[k]['of_allowed'] or 0.0)
      entry['pass'] = all(x['pass'] for x in (entry['mlm_logits'], entry['sop_logits'], *gradients.values()))
      results.append(entry)
      del params, got
      release()
  return results


def versions(platform: str) -> dict:
  import torch
  import transformers
  out = {'jax': jax.__version__, 'jaxlib': jaxlib.__version__, 'torch': torch.__version__,
         'transformers': transformers.__version__, 'torch_cuda': torch.version.cuda,
         'torch_cudnn': torch.backends.cudnn.version() if torch.cuda.is_available() else None}
  if torch.cuda.is_available():
    out['torch_device_name'] = torch.cuda.get_device_name()
  if platform == 'gpu':
    try:  # JAX names its CUDA libraries' versions nowhere public; a JAX that moved them goes without
      from jax._src.lib import cuda_versions
    except ImportError:
      cuda_versions = None
    for key, function in (('jax_cuda_runtime', 'cuda_runtime_get_version'), ('jax_cudnn', 'cudnn_get_version')):
      out[key] = getattr(cuda_versions, function, lambda: None)()
  return out


def percent(x) -> str:
  return 'n/a' if x is None else f'{x:.1%}'


def gib(x) -> str:
  return 'n/a' if x is None else f'{x / 2 ** 30:.1f}'


def markdown(result: dict) -> str:
  m, process_peak = result['matmul'], result['jax_process_peak_bytes']
  lines = [f'## albert_jax against HF transformers on {result["device_kind"]} ({result["date"]})', '',
           'versions: ' + ', '.join(f'{k} {v}' for k, v in result['versions'].items() if v is not None), '',
           f'memory: {result["memory"]}' + (f"; JAX's peak in this process {gib(process_peak)} GiB" if process_peak
                                            else ''), '',
           f'matmul rate measured here ({m["dtype"]}, {m["size"]}³): JAX {m["jax"] / 1e12:.3g} TFLOP/s, torch '
           f'{m["torch"] / 1e12:.3g} TFLOP/s; dense bf16 peak: '
           + ('n/a' if result['bf16_peak'] is None else f'{result["bf16_peak"] / 1e12:.0f} TFLOP/s'), '',
           'FLOPs per step for both: summary.training_flops_per_sequence × batch, the MLM head at the masked '
           "positions only; HF's heads compute MLM logits at every position (hf_flops_per_step_with_all_logits in the "
           'JSON), work its MFU does not count. Each MFU is against the dense bf16 peak and against its own '
           f'framework\'s measured matmul rate. Steps timed in {result["rounds"]} alternating blocks of '
           f'{result["steps"]}; peak memory: ours as XLA compiled the step, HF as torch allocated it.', '',
           *table_lines(result['rows']), '']
  if result['speedup'] is None:
    lines.append(f'speedup column: not measured (needs {result["reference"]} at {result["seq_lens"][0]})')
  else:
    lines += speedup_lines(result['speedup'])
  profiled = [r for r in result['rows'] if 'profile' in r]
  lines += ['', 'Targets:', *target_lines(result['targets']), '',
            *(['Profiles of our step where a target is missed (device time by kernel, of the step):',
               *(f'- {r["config"]} at {r["seq_len"]} ({r["attention"]}): {profile_line(r["profile"])}'
                 for r in profiled), ''] if profiled else []),
            'check_attention (XLA against cuDNN, same parameters, padded batch):',
            *check_lines(result['check_attention'])]
  return '\n'.join(lines) + '\n'


def table_lines(rows: list) -> list:
  lines = [HEADER, '|' + '---|' * (HEADER.count(' | ') + 1)]
  for r in rows:
    head = f'| {r["config"]} | {r["seq_len"]} | {r["attention"]}'
    if 'skipped' in r:
      lines.append(f'{head} | {r.get("batch", "")} | not measured: {r["skipped"]} |' + ' |' * 8)
      continue
    o, h = r['ours'], r['hf']
    resolved = '' if r['resolved_attention'] == r['attention'] else f' ({r["resolved_attention"]})'
    lines.append(f'{head}{resolved} | {r["batch"]} | {o["step_s"]:.4f} | {o["tokens_per_s"]:,.0f} | '
                 f'{h["step_s"]:.4f} | {h["tokens_per_s"]:,.0f} | **{r["ratio"]:.2f}x** | '
                 f'{percent(o["mfu_peak"])} · {percent(o["mfu_matmul"])} | '
                 f'{percent(h["mfu_peak"])} · {percent(h["mfu_matmul"])} | '
                 f'{gib(o["peak_memory_bytes"])} · {gib(h["peak_memory_bytes"])} | {h["mode"]} |')
  return lines


def speedup_lines(speedup: dict) -> list:
  lines = [f'Speedup (paper Table 3): sequences/s at {speedup["seq_len"]} relative to {speedup["reference"]}', '',
           SPEEDUP_HEADER, '|---|---|---|---|']
  for name, e in speedup['configs'].items():
    ours_cell = ', '.join(f'{a}: {e["ours_examples_per_s"][a]:,.1f} ({e["ours"][a]:.2f}x)' for a in e['ours'])
    paper = '' if e['paper'] is None else f'{e["paper"]}x'
    lines.append(f'| {name} | {ours_cell} | {e["hf_examples_per_s"]:,.1f} ({e["hf"]:.2f}x) | {paper} |')
  return lines


def target_lines(goals: list) -> list:
  lines = []
  for t in goals:
    if t['met'] is None:
      lines.append(f'- {t["target"]}: {t["note"]}')
      continue
    shown = percent if 'MFU' in t['target'] else lambda x: f'{x:.2f}x'
    lines.append(f'- {t["target"]}: {shown(t["value"])} (target >= {shown(t["threshold"])}): '
                 f'{"met" if t["met"] else "missed"}')
  return lines


def check_lines(check) -> list:
  if isinstance(check, str):
    return [f'- {check}']
  lines = []
  for c in check:
    if 'skipped' in c:
      lines.append(f'- {c["config"]}: skipped: {c["skipped"]}')
      continue
    worst = c['gradients'][c['worst_gradient']]
    lines.append(f'- {c["config"]} at {c["seq_len"]}: MLM logits max abs {c["mlm_logits"]["max_abs"]:.3g} '
                 f'({percent(c["mlm_logits"]["max_rel"])} of the largest), SOP logits {c["sop_logits"]["max_abs"]:.3g} '
                 f'({percent(c["sop_logits"]["max_rel"])}), worst gradient {c["worst_gradient"]} '
                 f'{worst["max_abs"]:.3g} ({percent(worst["max_rel"])}, {percent(worst["of_allowed"])} of what is '
                 f'allowed): {"pass" if c["pass"] else "FAIL"} (tolerance {percent(c["tolerance"])} of the largest)')
  return lines


def parse_args() -> argparse.Namespace:
  """The flags, checked, with the defaults filled in for this platform and for --smoke; args.suite and args.names
  hold the configs to measure."""
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--configs', type=comma_list, help='comma list; default: all seven (base, large, xlarge, '
                      'xxlarge, bert_base, bert_large, bert_xlarge), or the three tiny ones with --smoke')
  parser.add_argument('--seq_lens', type=lambda text: [int(x) for x in comma_list(text)],
                      help="comma list; default: 512,128 (32,16 with --smoke). The first is the speedup column's and "
                      "the xxlarge targets'")
  parser.add_argument('--attention', type=comma_list, help='comma list of model.attention values; default: '
                      'xla,cudnn on a GPU, else xla')
  parser.add_argument('--batch', type=batch_spec, help='per-device batch: N, or a comma list of N, CONFIG:N, '
                      'CONFIG@SEQ:N (e.g. xxlarge@512:16,base:64); default: the largest that fits both frameworks '
                      'on an accelerator, 8 on a CPU (4 with --smoke)')
  parser.add_argument('--torch_compile', choices=('auto', 'on', 'off'), default='auto',
                      help="HF's step through torch.compile; auto: on CUDA (on a CPU the first compile takes ~45 s)")
  parser.add_argument('--check_attention', action=argparse.BooleanOptionalAction,
                      help='compare XLA and cuDNN attention (a GPU only); default: when both are measured')
  parser.add_argument('--rounds', type=int, help='timed blocks of each framework per row; default 5 (2 with --smoke)')
  parser.add_argument('--steps', type=int, help='timed steps per block; default 3 (2 with --smoke)')
  parser.add_argument('--out', default='/tmp/albert_jax_bench', help='directory for accelerator.json and .md')
  parser.add_argument('--scan_unroll', type=int, help="our encoder's blocks per loop iteration "
                      "(config.model.scan_unroll; the layer count unrolls it, 1 keeps the loop); default: the "
                      "config's (0: every block on a GPU, else 1)")
  parser.add_argument('--profile', help='directory: trace our step (jax.profiler) where a row misses its target '
                      '(every row with --smoke) and sum the trace into the row')
  parser.add_argument('--smoke', action='store_true', help='tiny shapes, batch 4, 2 blocks of 2 steps: seconds on a '
                      'CPU (JAX_PLATFORMS=cpu CUDA_VISIBLE_DEVICES= on a GPU machine)')
  args = parser.parse_args()
  args.suite = smoke_suite() if args.smoke else paper_suite()
  args.names = args.configs or list(args.suite.configs)
  args.seq_lens = args.seq_lens or list(args.suite.seq_lens)
  args.attention = args.attention or (['xla', 'cudnn'] if jax.default_backend() == 'gpu' else ['xla'])
  args.rounds, args.steps = args.rounds or (2 if args.smoke else 5), args.steps or (2 if args.smoke else 3)
  for name in args.names:
    if name not in args.suite.configs:
      parser.error(f'--configs: unknown config {name!r}; known: {", ".join(args.suite.configs)}')
  for attention in args.attention:
    if attention not in model_lib.ATTENTION:
      parser.error(f'--attention: unknown {attention!r}; known: {", ".join(model_lib.ATTENTION)}')
  if min(args.seq_lens) < 4 or min(*(args.batch or {0: 1}).values(), args.rounds, args.steps) < 1:
    parser.error('--seq_lens must be above 3, and --batch, --rounds and --steps positive')
  return args


def environment(args) -> dict:
  """The devices and what every row is measured against: the bf16 peak, each framework's matmul rate."""
  import torch
  platform, kind = jax.default_backend(), jax.devices()[0].device_kind
  device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
  share = float(os.environ.get('XLA_CLIENT_MEM_FRACTION') or os.environ['XLA_PYTHON_CLIENT_MEM_FRACTION'])
  if device.type == 'cuda':
    torch.cuda.set_per_process_memory_fraction(share)
    memory = (f'JAX and torch share the GPU, each capped at {share:.0%} of its memory (XLA_CLIENT_MEM_FRACTION, '
              f'torch.cuda.set_per_process_memory_fraction)')
  else:
    torch.set_num_threads(os.cpu_count())
    memory = f'torch on {device.type}, JAX on {platform}: no device memory to share or measure'
  size, dtype, repeats = (8192, 'bfloat16', 50) if platform != 'cpu' else (1024, 'float32', 5)
  return {'platform': platform, 'device_kind': kind, 'torch_device': device, 'versions': versions(platform),
          'memory': memory, 'memory_share': share if device.type == 'cuda' else None,
          'mesh': sharding.make_mesh(args.suite.configs[args.names[0]].mesh, jax.devices()[:1]),
          'torch_compile': args.torch_compile == 'on' or args.torch_compile == 'auto' and device.type == 'cuda',
          'peak': accelerators.bf16_peak(kind),
          'matmul': {'jax': metrics.measured_matmul_flops(size, repeats, dtype),
                     'torch': torch_matmul_flops(size, dtype, repeats, device), 'dtype': dtype, 'size': size}}


def attention_check(args, env: dict, rows: list):
  if env['platform'] != 'gpu':
    return 'skipped: no GPU'
  both = {'xla', 'cudnn'} <= {r['resolved_attention'] for r in rows if 'skipped' not in r}
  if args.check_attention is False:
    return 'skipped: --no-check_attention'
  if args.check_attention is None and not both:
    return 'skipped: xla and cudnn were not both measured (--check_attention runs it anyway)'
  return check_attention(args.suite, args.names, env['mesh'])


def main():
  args = parse_args()
  env = environment(args)
  matmul = env['matmul']
  say(f'{env["device_kind"]} ({env["platform"]}), torch on {env["torch_device"]}; {env["memory"]}')
  say(f'matmul ({matmul["dtype"]}, {matmul["size"]}³): JAX {matmul["jax"] / 1e12:.3g}, torch '
      f'{matmul["torch"] / 1e12:.3g} TFLOP/s; configs {", ".join(args.names)} at '
      f'{", ".join(map(str, args.seq_lens))}; attention {", ".join(args.attention)}')

  out = epath.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  rows = []
  for i, name in enumerate(args.names):
    say(f'[{i + 1}/{len(args.names)}] {name}')
    during = f'not run: the run stopped during config {i + 1} of {len(args.names)}'
    # After every row and config: a run stopped at a time limit (a lent GPU's minutes are few) keeps what it
    # measured.
    rows += measure(name, args.suite.configs[name], args, env,
                    save=lambda partial: write(out, summary(args, env, rows + partial, during)))
    release()
    write(out, summary(args, env, rows, f'not run: the run stopped after {i + 1} of {len(args.names)} configs'))
  text = write(out, summary(args, env, rows, attention_check(args, env, rows)))
  say(f'\n{text}\nwrote {out / "accelerator.json"} and {out / "accelerator.md"}')


def summary(args, env: dict, rows: list, check) -> dict:
  """Every figure of the rows measured so far, with what they are measured against."""
  return {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
          **{k: env[k] for k in ('platform', 'device_kind', 'versions', 'memory', 'memory_share', 'matmul')},
          'torch_device': str(env['torch_device']), 'bf16_peak': env['peak'],
          'jax_process_peak_bytes': (jax.local_devices()[0].memory_stats() or {}).get('peak_bytes_in_use'),
          'rounds': args.rounds, 'steps': args.steps, 'smoke': args.smoke, 'seq_lens': args.seq_lens,
          'scan_unroll': args.scan_unroll, 'xla_flags': os.environ.get('XLA_FLAGS'),
          'reference': args.suite.reference, 'rows': rows,
          'speedup': speedups(rows, args.suite, args.seq_lens[0]),
          'targets': targets(rows, args.suite, args.seq_lens[0]), 'check_attention': check}


def write(out: epath.Path, result: dict) -> str:
  """accelerator.json and accelerator.md under `out`; returns the markdown."""
  (out / 'accelerator.json').write_text(json.dumps(result, indent=2) + '\n')
  text = markdown(result)
  (out / 'accelerator.md').write_text(text)
  return text


if __name__ == '__main__':
  main()
