"""bench/compile_depth.py: with the loop kept the compiled gradient is the same program at any depth; unrolled it
grows with each layer; the temporaries grow with depth (each layer's activations are kept for
the backward pass); the gradient it times is the compiled one, run on concrete values."""

from conftest import import_bench, load_config


def test_loop_kept_is_flat_in_depth_and_unrolled_grows_by_a_layer_at_a_time():
  bench = import_bench('compile_depth')
  config = load_config('configs/tiny.py')
  config.model.update(vocab_size=200, embedding_size=16, hidden_size=32, num_heads=2, intermediate_size=64)
  config.data.max_predictions_per_seq = 3
  runs = [(12, '1'), (24, '1'), (2, 'all'), (3, 'all'), (4, 'all')]
  timed = [(12, '1'), (4, 'all')]
  measured = {run: bench.measure(config.copy_and_resolve_references(), *run, batch=2, seq_len=16,
                                 time_steps=2 if run in timed else 0)
              for run in runs}
  size = {run: program for run, (_, program, _, _) in measured.items()}
  assert size[12, '1'] == size[24, '1']  # only the trip count differs, in as many digits
  assert size[2, 'all'] < size[3, 'all'] < size[4, 'all']  # each unrolled layer adds its forward and backward
  assert size[4, 'all'] > size[24, '1']  # ... so that four layers unrolled outgrow 24 in the loop
  assert [run for run, (*_, step) in measured.items() if step is not None] == timed
  assert all(measured[run][3] > 0 for run in timed)
  assert measured[24, '1'][2] > measured[12, '1'][2]  # the activations kept for the backward pass, a layer's each
