"""Look at what the pipeline feeds the model.

  python -m albert_jax.data.inspect --config=configs/tiny.py [--num=4]     decoded examples
  python -m albert_jax.data.inspect --config=configs/tiny.py --stats       measured statistics as JSON
  python -m albert_jax.data.inspect --config=CONFIG --host=5 --host_count=64   host 5's share of a 64-host pod
  python -m albert_jax.data.inspect --config=CONFIG --shards=256 --host_count=8 --host=1   ... of a run on 256 shards

Examples are led by how the host started: the seconds and CPU to its first batch and its peak memory (what each
host of a pod pays before its first step; a corpus never indexed is indexed first, here by this process alone),
and which documents of each source are its share.

Examples show the pieces with masked positions as [MASK->label] (or =label when kept, ~label when replaced
by a random piece), the segment boundary and the sentence label. --stats measures, over --batches batches:
the n-gram length distribution over whole words, the fraction of tokens predicted, the 80/10/10 split, label
balance, the short-target rate, padding, what the sources skipped and why, the sentences the sources split the
text into (median words, the shares over 100 words and under 3), and documents and instances per MB of text read.
"""
import collections
import json
import resource
import time

import numpy as np
from absl import flags
from ml_collections import config_flags

from albert_jax.config import run_cli
from albert_jax.data import masking, pipeline, vocab
from albert_jax.data.tokenizer import MASK
from albert_jax.errors import ConfigError

def render(batch: dict, row: int, tokenizer) -> str:
  length = int(batch['input_mask'][row].sum())
  ids = batch['input_ids'][row, :length]
  pieces = tokenizer.decode_pieces(ids)
  weights = batch['masked_lm_weights'][row] > 0
  for position, label in zip(batch['masked_lm_positions'][row][weights], batch['masked_lm_ids'][row][weights]):
    original = tokenizer.decode_pieces([label])[0]
    if ids[position] == MASK:
      pieces[position] = f'[MASK->{original}]'
    elif ids[position] == label:
      pieces[position] = f'[={original}]'
    else:
      pieces[position] = f'[~{pieces[position]}->{original}]'
  label = int(batch['sentence_order_labels'][row])
  return (f'label {label} ({"swapped/random" if label else "in order"}), {length} tokens, '
          f'{int(weights.sum())} predictions:\n  ' + ' '.join(pieces))


def measure(data_pipeline, batches: int) -> dict:
  """Statistics over `batches` batches, as the original defines them."""
  predicted = real = padding = total = 0
  replaced = collections.Counter()
  for _ in range(batches):
    batch = data_pipeline.next_batch()
    weights = batch['masked_lm_weights'] > 0
    rows = np.nonzero(weights)[0]
    shown = batch['input_ids'][rows, batch['masked_lm_positions'][weights]]
    labels = batch['masked_lm_ids'][weights]
    replaced['mask'] += int(np.sum(shown == MASK))
    replaced['kept'] += int(np.sum((shown != MASK) & (shown == labels)))
    replaced['random'] += int(np.sum((shown != MASK) & (shown != labels)))
    predicted += int(weights.sum())
    real += int(batch['input_mask'].sum())
    padding += int((batch['input_mask'] == 0).sum())
    total += batch['input_mask'].size
  stats = data_pipeline.stats
  words, megabytes = stats.sentence_words, max(stats.text_bytes, 1) / 1e6
  spans = np.bincount(stats.span_words, minlength=data_pipeline.data.ngram + 1)[1:]
  return {
      'instances': stats.instances,
      'ngram_distribution': (spans / max(1, spans.sum())).round(4).tolist(),
      'ngram_expected': masking.ngram_probabilities(data_pipeline.data.ngram).round(4).tolist(),
      'predictions_per_instance': predicted / stats.instances,
      'fraction_of_tokens_predicted': predicted / real,
      'replacement': {k: v / max(1, predicted) for k, v in sorted(replaced.items())},
      'label_1_fraction': stats.labels / stats.instances,
      'short_target_fraction_of_documents': stats.short_documents / max(1, stats.documents),
      'short_target_fraction_of_instances': stats.short / stats.instances,
      'padding_fraction': padding / total,
      'skipped': data_pipeline.skipped(),
      # What the sources' sentence splitting gave: headings and hard-wrapped lines left in show as many very short
      # "sentences", unsplit paragraphs as very long ones.
      'sentences': {'count': len(words), 'median_words': float(np.median(words)) if words else 0.0,
                    'fraction_over_100_words': float(np.mean(np.asarray(words) > 100)) if words else 0.0,
                    'fraction_under_3_words': float(np.mean(np.asarray(words) < 3)) if words else 0.0},
      'documents_per_mb': stats.documents_read / megabytes,
      'instances_per_mb': stats.instances_made / megabytes,
  }


def start_report(data_pipeline, opened_s: float, start_s: float, cpu_s: float) -> str:
  """How host K of N started: the time to its first batch, the CPU it took, its peak memory, and its documents."""
  shares = []
  for i, source in enumerate(data_pipeline.sources):
    chunks = [c for stream in data_pipeline.streams if stream.index == i for c in stream.chunks]
    shares.append(f'{source.name}: ' + (f'documents {chunks[0][0]:,}..{chunks[-1][1] - 1:,} of {len(source):,}'
                                        if chunks else f'none of {len(source):,}'))
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 10
  shards = data_pipeline.shards
  return (f'host {data_pipeline.host} of {data_pipeline.host_count} (data shards {shards.start}..{shards.stop - 1} '
          f'of {data_pipeline.shard_count}): first batch {start_s:.2f} s after start (sources opened in '
          f'{opened_s:.2f} s), {cpu_s:.2f} CPU s, peak memory {peak:,.0f} MB; its {data_pipeline.split} share: '
          + '; '.join(shares))


def main(argv):
  del argv
  if _HOST_COUNT.value < 1 or not 0 <= _HOST.value < _HOST_COUNT.value:
    raise ConfigError(f'--host={_HOST.value} --host_count={_HOST_COUNT.value}: a pod of N hosts has hosts 0 to N-1; '
                      f'give a --host below --host_count (and a --host_count of at least 1).')
  config = _CONFIG.value
  tokenizer = vocab.load_tokenizer(config.data.vocab, config.model.vocab_size, config.data.tfds_data_dir)
  # What a host of a pod does at start, timed: open the sources (read their indexes, or make them), then its batch.
  start, cpu = time.perf_counter(), time.process_time()
  opened = pipeline.open_sources(config.data)
  opened_s = time.perf_counter() - start
  data_pipeline = pipeline.Pipeline(config.data, tokenizer, _BATCH_SIZE.value * _HOST_COUNT.value,
                                    split=_SPLIT.value, host=_HOST.value, host_count=_HOST_COUNT.value,
                                    collect_stats=_STATS.value, opened=opened, shards=_SHARDS.value or None)
  if _STATS.value:
    print(json.dumps(measure(data_pipeline, _BATCHES.value), indent=2))
    return
  batch = data_pipeline.next_batch()
  print(start_report(data_pipeline, opened_s, time.perf_counter() - start, time.process_time() - cpu) + '\n')
  for row in range(min(_NUM.value, len(batch['input_ids']))):
    print(f'#{row} ' + render(batch, row, tokenizer) + '\n')


if __name__ == '__main__':
  # Defined here, not on import: tests import measure() beside train.py, which defines --config too.
  _CONFIG = config_flags.DEFINE_config_file('config', None, 'Path to a config file in configs/.', lock_config=True)
  _NUM = flags.DEFINE_integer('num', 4, 'Examples to print.')
  _STATS = flags.DEFINE_bool('stats', False, 'Print measured statistics as JSON instead of examples.')
  _BATCHES = flags.DEFINE_integer('batches', 50, 'Batches measured by --stats.')
  _BATCH_SIZE = flags.DEFINE_integer('batch_size', 32, 'Batch size of the host inspected (not the training batch).')
  _SPLIT = flags.DEFINE_enum('split', 'train', ['train', 'eval'], 'Which documents.')
  _HOST = flags.DEFINE_integer('host', 0, 'The host whose share is inspected, as it would be on a pod of '
                               '--host_count hosts.')
  _HOST_COUNT = flags.DEFINE_integer('host_count', 1, 'Hosts the corpus is shared by.')
  _SHARDS = flags.DEFINE_integer('shards', 0, 'The data shards of the run inspected (its config.json\'s data.shards; '
                                 '0: one per host). The global batch is the same on any --host_count dividing it.')
  flags.mark_flags_as_required(['config'])
  run_cli(main)
