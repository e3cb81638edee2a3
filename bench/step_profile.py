"""Where a training step's time goes, ours against HF's, op by op: the profile behind the speed tables.

  python bench/step_profile.py [--config=configs/tiny.py] [--task=sst2] [--batch=N] [--seq_len=N] [--steps=5]
      [--top=15]

Ours: train.py's step (step.build, compiled as train.py compiles it) traced with jax.profiler; every operation
XLA:CPU runs (a thunk: a fusion, a dot, a copy) is timed by the trace and named in the compiled HLO, whose
metadata says which part of the program it comes from: the forward pass (JAX's `jvp(...)`), the backward pass
(`transpose(jvp(...))`) or the rest (the optimizer, the metrics), and which JAX operation of which module. HF:
AlbertForPreTraining with its MLM head at the masked positions (ours's work: shared.hf_pretraining_loss),
AdamW and our clipping, traced with torch.profiler, the forward, the backward and the optimizer profiled apart.
Both on the same random batch, in float32 without dropout. Prints each side's time per step by phase with the
number of operations it ran (XLA's thunks; torch's aten kernels), and the heaviest operations of each phase with
their shares; writes nothing. Needs the [hf] extra.
"""
import argparse
import collections
import os
import re
import tempfile
import time

import jax

from albert_jax import cpu_allocator, sharding
from albert_jax.config import from_file, validate
from shared import (GLUE_TASKS, compiled_train_step, fine_tuning, hf_arm, perfetto_events, program_on_one_device,
                    random_batch)

PHASES = ('forward', 'backward', 'rest')
INSTRUCTION = re.compile(r'^\s*(?:ROOT )?%?([\w.\-]+) = \S+ (\w[\w\-]*)\(.*?metadata=\{op_name="([^"]*)"')


def phase_of(op_name: str) -> str:
  """The part of the train step a JAX op_name comes from: value_and_grad traces the loss under jvp and its
  gradient as the jvp's transpose; the optimizer and the metrics are outside both."""
  if 'transpose(jvp(' in op_name:
    return 'backward'
  return 'forward' if 'jvp(' in op_name else 'rest'


def hlo_names(hlo_text: str) -> dict:
  """{instruction name: (phase, what it is)} for the compiled module's instructions that carry metadata; what it
  is: the HLO opcode (and fusion kind) with the JAX operation's path inside the model, the jit and jvp wrappers
  dropped."""
  out = {}
  for line in hlo_text.splitlines():
    found = INSTRUCTION.match(line)
    if not found:
      continue
    name, opcode, op_name = found.groups()
    kind = re.search(r'"kind":"(\w+)"', line) or re.search(r'kind=(\w+)', line)
    where = re.sub(r'\w+\(|\)', '', op_name.split('/', 1)[-1])  # jit(train_step)/transpose(jvp(Albert))/x -> Albert/x
    where = where.replace('/while/body/closed_call', '')
    out[name] = (phase_of(op_name), f'{opcode}{"[" + kind.group(1) + "]" if kind else ""} {where}')
  return out


def trace_seconds(directory: str) -> tuple:
  """({event name: seconds}, {event name: how many}) summed over a jax.profiler trace's complete events."""
  seconds, count = collections.Counter(), collections.Counter()
  for e in perfetto_events(directory)[1]:
    if e.get('ph') == 'X' and 'dur' in e:
      seconds[e['name']] += e['dur'] * 1e-6
      count[e['name']] += 1
  return seconds, count


def ours(config, shape, batch: dict, steps: int, task=None) -> tuple:
  """(seconds per step by phase, [(seconds per step, phase, what)] heaviest first, untraced seconds per step,
  operations run per step by phase). The pretraining step train.py compiles, or with `task` the one finetune.py
  compiles for it."""
  program, mesh = program_on_one_device(config, shape, task)
  compiled = compiled_train_step(program, batch, mesh)
  with jax.set_mesh(mesh):
    state = [program.new_state(jax.random.key(0))]
    device_batch = sharding.global_batch(batch, mesh)

  def step():
    state[0], _ = compiled(state[0], device_batch)
    jax.block_until_ready(state[0])

  for _ in range(3):
    step()
  started = time.perf_counter()
  for _ in range(steps):
    step()
  untraced = (time.perf_counter() - started) / steps
  with tempfile.TemporaryDirectory() as directory:
    with jax.profiler.trace(directory, create_perfetto_trace=True):
      for _ in range(steps):
        step()
    seconds, count = trace_seconds(directory)
  names = hlo_names(compiled.as_text())
  by_phase, ops, calls = collections.Counter(), [], collections.Counter()
  for name, total in seconds.items():
    if name in names:
      phase, what = names[name]
      by_phase[phase] += total / steps
      calls[phase] += count[name] / steps
      ops.append((total / steps, phase, what))
  return by_phase, sorted(ops, reverse=True), untraced, calls


def huggingface(config, shape, batch: dict, steps: int, task=None) -> tuple:
  """The same for HF's step: each phase profiled by torch.profiler around its own call; operations by their own
  (self) CPU time. With `task`, AlbertForSequenceClassification of the same shape on the same batch."""
  import torch
  torch.set_num_threads(os.cpu_count())
  torch.manual_seed(0)
  hf, loss_of = hf_arm(shape, batch, task, masked_only=True)
  hf.train()
  optimizer = torch.optim.AdamW(hf.parameters(), lr=1e-4, weight_decay=0.01)

  def forward():
    optimizer.zero_grad(set_to_none=True)
    return loss_of()

  def rest():
    torch.nn.utils.clip_grad_norm_(hf.parameters(), config.train.clip_norm)
    optimizer.step()

  for _ in range(3):
    forward().backward()
    rest()
  started = time.perf_counter()
  for _ in range(steps):
    forward().backward()
    rest()
  untraced = (time.perf_counter() - started) / steps
  by_phase, ops, calls = collections.Counter(), collections.Counter(), collections.Counter()
  loss = None

  def backward():
    loss.backward()

  for _ in range(steps):
    for phase, run in (('forward', forward), ('backward', backward), ('rest', rest)):
      with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        started = time.perf_counter()
        result = run()
        by_phase[phase] += (time.perf_counter() - started) / steps
      loss = result if phase == 'forward' else loss
      for event in profiler.key_averages():
        ops[(phase, event.key)] += event.self_cpu_time_total * 1e-6 / steps
        if event.key.startswith('aten::'):  # the kernels, not autograd's or the optimizer's wrappers
          calls[phase] += event.count / steps
  return by_phase, sorted(((t, p, k) for (p, k), t in ops.items()), reverse=True), untraced, calls


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--config', default='configs/tiny.py', help='any config file; its model is profiled')
  parser.add_argument('--batch', type=int, help="default: the config's batch")
  parser.add_argument('--seq_len', type=int, help="default: the config's max_seq_length")
  parser.add_argument('--scan_unroll', type=int, help="model.scan_unroll (default: the config's; with --task, the "
                      "fine-tuning config's)")
  parser.add_argument('--steps', type=int, default=5, help='profiled steps of each')
  parser.add_argument('--top', type=int, default=15, help='operations listed per side and phase')
  parser.add_argument('--task', choices=sorted(GLUE_TASKS),
                      help="the fine-tuning step of this GLUE task (finetune.py's program, its batch, length and "
                           "optimizer; HF: AlbertForSequenceClassification) with the config's model")
  args = parser.parse_args()
  config = from_file(args.config)
  task = None
  if args.task:
    config, task, shape, batch = fine_tuning(args.task, config, args.batch, args.seq_len, args.scan_unroll)
    batch_size, seq_len = batch['input_ids'].shape
  else:
    config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)  # as HF's
    if args.scan_unroll is not None:
      config.model.scan_unroll = args.scan_unroll
    batch_size, seq_len = args.batch or config.train.batch_size, args.seq_len or config.data.max_seq_length
    config.model.max_position_embeddings = max(config.model.max_position_embeddings, seq_len)
    shape = validate(config)
    batch = random_batch(batch_size, seq_len, config.data.max_predictions_per_seq, shape.vocab_size)
  sides = {'ours': ours(config, shape, batch, args.steps, task),
           'HF': huggingface(config, shape, batch, args.steps, task)}
  what = (f'{args.task} fine-tuning step' if task else f'{config.data.max_predictions_per_seq} masked')
  print(f'{args.config}: V {shape.vocab_size}, E {shape.embedding_size}, H {shape.hidden_size}, '
        f'{shape.num_layers} layers, batch {batch_size} x {seq_len}, {what}, '
        f'scan_unroll {shape.for_platform(jax.devices()[0].platform).scan_unroll}, fp32, {args.steps} profiled steps '
        f'each, {jax.devices()[0].device_kind}, load {os.getloadavg()[0]:.2f}')
  print(f'| ms a step (operations) | {" | ".join(PHASES)} | traced sum | untraced step |\n|---|---|---|---|---|---|')
  for side, (by_phase, _, untraced, calls) in sides.items():
    print(f'| {side} | ' + ' | '.join(f'{by_phase[p] * 1e3:.1f} ({calls[p]:,.0f})' for p in PHASES) +
          f' | {sum(by_phase.values()) * 1e3:.1f} ({sum(calls.values()):,.0f}) | {untraced * 1e3:.1f} |')
  for side, (by_phase, ops, _, _) in sides.items():
    for phase in PHASES:
      heaviest = [op for op in ops if op[1] == phase][:args.top]
      print(f'\n{side}, {phase}: {by_phase[phase] * 1e3:.1f} ms a step; heaviest operations')
      for seconds, _, what in heaviest:
        print(f'  {seconds * 1e3:7.2f} ms {seconds / max(by_phase[phase], 1e-12):6.1%}  {what[:100]}')
  return sides


if __name__ == '__main__':
  cpu_allocator.reuse_freed_memory()  # as the command-line tools, for both sides alike
  main()
