"""bench/compile_depth.py: with the loop kept the compiled gradient is the same program at any depth; unrolled it
grows by the same amount with each layer; the gradient it times is the compiled one, run on concrete values."""

from conftest import import_bench, load_config


def test_loop_kept_is_flat_in_depth_and_unrolled_grows_by_a_layer_at_a_time():
  bench = import_bench('compile_depth')
  config = load_config('configs/tiny.py')
  config.model.update(vocab_size=200, embedding_size=16, hidden_size=32, num_heads=2, intermediate_size=64)
  config.data.max_predictions_per_seq = 3
  runs = [(2, '1'), (4, '1'), (2, 'all'), (3, 'all'), (4, 'all')]
  measured = {(layers, unroll): bench.measure(config.copy_and_resolve_references(), layers, unroll, batch=2,
                                              seq_len=16, time_steps=2 if layers == 4 else 0)
              for layers, unroll in runs}
  size = {run: program for run, (_, program, _) in measured.items()}
  assert size[2, '1'] == size[4, '1']  # only the trip count differs, a digit
  growth = size[3, 'all'] - size[2, 'all'], size[4, 'all'] - size[3, 'all']
  assert min(growth) > 0 and abs(growth[1] - growth[0]) < 0.05 * growth[0]
  assert [run for run, (_, _, step) in measured.items() if step is not None] == [(4, '1'), (4, 'all')]
  assert all(measured[4, unroll][2] > 0 for unroll in ('1', 'all'))
