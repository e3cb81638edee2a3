"""The journeys the README routes to (docs/laptop.md, docs/from_a_checkpoint.md, docs/your_corpus_on_a_pod.md,
docs/pods.md's headline, and the paper's tables from the README itself), run as shown: each page's command block
is read from the page and run in order, with only what cannot exist here replaced (the network: pip, git clone and
HF's hub; the pod: gcloud, by the recording stand-in of conftest.py; Cloud Storage: the GCS server on 127.0.0.1)
and each run shrunk by overrides appended after the page's own (fewer steps, shorter sequences, smaller sizes). A
command added to a page, or one whose flags no longer work, fails here; so does a pod training command on any page
that would not fit its slice."""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, xla_flags

SHARED_DATA = ROOT.parent / 'shared' / 'data'
pytestmark = pytest.mark.skipif(not (SHARED_DATA / 'blimp').is_dir() or not (SHARED_DATA / 'glue').is_dir(),
                                reason=f'the journeys read slices of the shared data at {SHARED_DATA}')

# Appended after a page's own flags (the last of a repeated flag wins): a few steps of short sequences.
PRETRAIN_SMALL = ['--config.data.max_seq_length=64', '--config.data.max_predictions_per_seq=10',
                  '--config.train.batch_size=8', '--config.train.num_steps=8', '--config.train.warmup_steps=2',
                  '--config.train.log_every=4', '--config.train.eval_every=8', '--config.train.eval_batches=1',
                  '--config.train.checkpoint_every=8']
FINETUNE_SMALL = ['--config.train.batch_size=8', '--config.train.num_steps=8', '--config.train.warmup_steps=2',
                  '--config.train.log_every=4', '--config.train.checkpoint_every=8',
                  '--config.train.eval_batch_size=64', '--config.task.max_seq_length=64']


SHELL = ('&&', '&', '>', '2>&1', '|', ';')


def command_block(page: str, block: int = 0, under: str = '') -> list:
  """The `block`-th bash block of docs/PAGE (after the heading `under`, if given) as argv lists, one per line
  (continuation lines joined), each up to its first shell operator (a redirection, `&`, `&&`)."""
  text = (ROOT / 'docs' / page).read_text()
  text = text[text.index(under):] if under else text
  code = re.findall(r'```bash\n(.*?)```', text, re.S)[block]
  commands = [shlex.split(line) for line in code.replace('\\\n', ' ').splitlines() if line.strip()]
  return [argv[:next((i for i, a in enumerate(argv) if a in SHELL), len(argv))] for argv in commands]


def variables(export: list) -> dict:
  """`export A=1 B=2` as {'$A': '1', '$B': '2'}: what the page's later lines name."""
  assert export[0] == 'export', export
  return {f'${name}': value for name, value in (a.split('=', 1) for a in export[1:])}


def tool(argv: list) -> str:
  return argv[2] if argv[:2] == ['python', '-m'] else argv[0]


def substitute(argv: list, replace: dict) -> list:
  out = []
  for arg in argv:
    for old, new in replace.items():
      arg = arg.replace(old, new)
    out.append(arg)
  return out


def run(argv: list, *extra, cwd=ROOT) -> str:
  """`python ...` as a user runs it, with this interpreter; its console (stdout and stderr) on success."""
  assert argv[0] == 'python', argv
  env = {**os.environ, 'PYTHONPATH': str(ROOT), 'XLA_FLAGS': xla_flags(1)}
  result = subprocess.run([sys.executable, *argv[1:], *extra], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)
  assert result.returncode == 0, f'{shlex.join(argv)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}'
  return result.stdout + result.stderr


def workdir_of(argv: list) -> pathlib.Path:
  return pathlib.Path(next(a.split('=', 1)[1] for a in argv if a.startswith('--workdir=')))


def sst2_slice(folder):
  """The real SST-2 files' header and first rows, as the GLUE download's folder holds them; its test split (which
  the shared copy lacks) made of dev sentences, unlabelled and numbered, as GLUE's test.tsv is."""
  (folder / 'SST-2').mkdir(parents=True, exist_ok=True)
  for split, rows in (('train', 97), ('dev', 41)):
    lines = (SHARED_DATA / 'glue' / 'SST-2' / f'{split}.tsv').read_text().splitlines()[:rows]
    (folder / 'SST-2' / f'{split}.tsv').write_text('\n'.join(lines) + '\n')
  dev = (SHARED_DATA / 'glue' / 'SST-2' / 'dev.tsv').read_text().splitlines()[41:61]
  (folder / 'SST-2' / 'test.tsv').write_text(
      'index\tsentence\n' + ''.join(f'{i}\t{line.split(chr(9))[0]}\n' for i, line in enumerate(dev)))
  return folder


def sst2_hub(folder):
  """What `snapshot_download('nyu-mll/glue', repo_type='dataset', allow_patterns='sst2/*')` leaves, made of the
  real SST-2 rows of sst2_slice: sst2/SPLIT-00000-of-00001.parquet with sentence, label (the test split's -1) and
  idx, the label's names in the file's metadata."""
  from conftest import hub_parquet
  tsv = sst2_slice(folder.parent / f'{folder.name}_tsv') / 'SST-2'
  features = {'sentence': {'dtype': 'string', '_type': 'Value'},
              'label': {'names': ['negative', 'positive'], '_type': 'ClassLabel'},
              'idx': {'dtype': 'int32', '_type': 'Value'}}
  for split, hub_split in (('train', 'train'), ('dev', 'validation'), ('test', 'test')):
    lines = [line.split('\t') for line in (tsv / f'{split}.tsv').read_text().splitlines()[1:]]
    rows = [{'sentence': line[1], 'label': -1, 'idx': int(line[0])} if split == 'test' else
            {'sentence': line[0], 'label': int(line[1]), 'idx': i} for i, line in enumerate(lines)]
    hub_parquet(folder / 'sst2', hub_split, rows, features)
  return folder


def test_on_a_laptop(tmp_path, tiny_config):
  commands = command_block('laptop.md')
  assert [tool(c) for c in commands] == ['pip', 'albert_jax.train', 'albert_jax.finetune', 'albert_jax.finetune',
                                         'albert_jax.convert', 'git', 'albert_jax.blimp']
  install, pretrain, finetune, control, export, clone, blimp = commands
  assert install == ['pip', 'install', '-e', '.']  # what the quickstart's environment already did
  assert clone[:3] == ['git', 'clone', 'https://github.com/alexwarstadt/blimp']
  # BLiMP's checkout, without the network: three of its paradigms' files, as its data/ folder holds them.
  blimp_data = tmp_path / 'blimp' / 'data'
  blimp_data.mkdir(parents=True)
  for name in ('adjunct_island.jsonl', 'anaphor_gender_agreement.jsonl', 'causative.jsonl'):
    shutil.copy(SHARED_DATA / 'blimp' / name, blimp_data / name)
  here = {'/tmp/': f'{tmp_path}/'}
  tfds = f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}'

  out = run(substitute(pretrain, here), *PRETRAIN_SMALL, tfds)
  assert 'step 8/8' in out
  evaluated = json.loads((tmp_path / 'albert_tiny' / 'result.json').read_text())
  assert evaluated['step'] == 8 and evaluated['eval_mlm_count'] == 8 * 10  # one batch of 8, 10 masked pieces each
  results = []
  for command in (finetune, control):
    run(substitute(command, here), *FINETUNE_SMALL, tfds)
    results.append(json.loads((workdir_of(substitute(command, here)) / 'result.json').read_text()))
  # Both scored on the same dev examples (the documents pretraining held out), the checkpoint kept by dev accuracy.
  assert results[0]['eval_accuracy_count'] == results[1]['eval_accuracy_count'] > 300
  assert all(r['best_step'] == 8 and r['metric'] == 'eval_accuracy' for r in results)
  assert json.loads((tmp_path / 'albert_tiny_builtin' / 'config.json').read_text())['init'] == f'{tmp_path}/albert_tiny'

  run(substitute(export, here))
  transformers = pytest.importorskip('transformers')
  hf = tmp_path / 'albert_tiny_hf'
  model = transformers.AlbertForPreTraining.from_pretrained(hf)
  tokenizer = transformers.AlbertTokenizer.from_pretrained(hf)
  assert model.config.hidden_size == 64 and len(tokenizer) == model.config.vocab_size == tiny_config.model.vocab_size

  out = run(substitute(blimp, here), '--pairs_per_paradigm=4')
  assert '12 pairs' in out  # 4 of each of the three paradigms


def wikipedia_documents(count: int) -> list:
  """The first `count` articles of the shared WikiExtractor sample, as text (title line dropped)."""
  text = (SHARED_DATA / 'corpora' / 'wikipedia' / 'AA' / 'wiki_00').read_text()
  articles = re.findall(r'<doc [^>]*>\n[^\n]*\n(.*?)</doc>', text, re.S)
  return [a.strip() for a in articles if len(a) > 2000][:count]


def test_from_a_released_checkpoint(tmp_path, builtin_tokenizer):
  transformers = pytest.importorskip('transformers')
  commands = command_block('from_a_checkpoint.md')
  assert [tool(c) for c in commands] == ['pip', 'python', 'python', 'albert_jax.data.inspect', 'albert_jax.train',
                                         'albert_jax.finetune']
  install, download, download_glue, inspect, pretrain, finetune = commands
  assert install == ['pip', 'install', '-e', '.[hf]']
  # The README shows this journey's commands as this page does.
  readme = [c for heading in ('## From a released checkpoint', '## Fine-tune and evaluate')
            for c in command_block('../README.md', under=heading)]
  assert readme == [download, pretrain, download_glue, finetune]
  # The Hub, without the network: an AlbertForMaskedLM folder as snapshot_download leaves it (config.json,
  # model.safetensors, spiece.model), of a small shape and the built-in vocabulary; and GLUE's sst2/ folder.
  assert download[1] == '-c'
  assert "snapshot_download('albert/albert-base-v2', local_dir='/tmp/albert-base-v2')" in download[2]
  assert ("snapshot_download('nyu-mll/glue', repo_type='dataset', allow_patterns='sst2/*', local_dir='/tmp/glue')"
          in download_glue[2])
  released = tmp_path / 'albert-base-v2'
  transformers.AlbertForMaskedLM(transformers.AlbertConfig(
      vocab_size=builtin_tokenizer.vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=2,
      num_attention_heads=2, intermediate_size=64)).save_pretrained(released)
  (released / 'spiece.model').write_bytes(builtin_tokenizer.sp.serialized_model_proto())
  sst2_hub(tmp_path / 'glue')
  domain = tmp_path / 'my_domain'  # the original's text format: a sentence a line, a blank line between documents
  domain.mkdir()
  for i, article in enumerate(wikipedia_documents(30)):
    (domain / f'{i % 3}.txt').open('a').write(re.sub(r'(?<=\.) ', '\n', article) + '\n\n')
  here = {'/tmp/': f'{tmp_path}/', '/data/my_domain': str(domain)}

  # albert-base-v2's vocabulary has the 30,000 pieces configs/base.py says; this stand-in's has the built-in 4,000.
  out = run(substitute(inspect, here), f'--config.model.vocab_size={builtin_tokenizer.vocab_size}')
  assert '[MASK' in out
  out = run(substitute(pretrain, here), *PRETRAIN_SMALL)
  assert 'step 8/8' in out
  assert re.search(r'it has no (pooler|sop_head) and no (pooler|sop_head): new, from random weights', out), out[-3000:]
  recorded = json.loads((tmp_path / 'albert_domain' / 'config.json').read_text())
  assert (recorded['model']['hidden_size'], recorded['model']['embedding_size']) == (32, 16)  # the checkpoint's
  assert recorded['data']['vocab'] == f'{released}/spiece.model'
  run(substitute(finetune, here), *FINETUNE_SMALL)
  result = json.loads((tmp_path / 'sst2' / 'result.json').read_text())
  assert result['eval_accuracy_count'] == 40  # the slice's dev rows, read from the Hub's Parquet


# ALBERT-base's shape shrunk for this machine (its sizes only: every other setting is the page's), and the sizes
# the built-in vocabulary's 4,000 pieces need.
BASE_SHRUNK = ['--config.model.embedding_size=16', '--config.model.hidden_size=32', '--config.model.num_layers=2',
               '--config.model.num_heads=2', '--config.model.intermediate_size=64', '--config.model.vocab_size=4000',
               '--config.model.max_position_embeddings=64']


def test_your_corpus_on_a_pod(tmp_path, bucket, gcloud, monkeypatch):
  """The page's blocks as written: the variables, the bucket and credentials (gcloud's stand-in records them), the
  vocabulary, index, inspection and fit check (the exact ALBERT-base step compiled for a v3-64: training takes 2
  microbatches by itself), the pod through babysit, logs, status, goodput, export and delete; then GLUE's SST-2
  from the Hub's layout, copied into the bucket, fine-tuned. Runs are shrunk by overrides of sizes, steps and
  batch appended after the page's own, and nothing else."""
  setup, on_the_worker = command_block('your_corpus_on_a_pod.md', 1), command_block('your_corpus_on_a_pod.md', 2)
  commands = command_block('your_corpus_on_a_pod.md', 0)
  assert [tool(c) for c in commands] == [
      'export', 'gcloud', 'gcloud', 'gcloud', 'pip', 'albert_jax.data.vocab', 'albert_jax.data.prepare',
      'albert_jax.data.inspect', 'albert_jax.aot', 'launch.tpu', 'launch.tpu', 'launch.tpu', 'launch.tpu',
      'launch.tpu', 'albert_jax.goodput', 'albert_jax.convert', 'launch.tpu']
  (export, project, make_bucket, credentials, install, vocab, prepare, inspect, fit, create, setup_pod, babysit, logs,
   status, goodput, export_hf, delete) = commands
  assert [c[3] for c in (create, setup_pod, babysit, logs, status, delete)] == [
      'create', 'setup', 'babysit', 'logs', 'status', 'delete']
  here = {**variables(export), '$BUCKET': bucket[len('gs://'):]}
  calls, worker = gcloud

  # The bucket, the project and Python's credentials: gcloud's (recorded) calls, as written.
  for command in (project, make_bucket, credentials):
    subprocess.run(substitute(command, here), check=True)
  assert calls()[-3:] == [['config', 'set', 'project', 'my-project'],
                          ['storage', 'buckets', 'create', bucket, '--location=europe-west4'],
                          ['auth', 'application-default', 'login']]
  assert install == ['pip', 'install', '-e', '.[tpu]']

  # The corpus in the bucket: JSON lines compressed with zstandard, the text in the field `text`.
  import zstandard
  from albert_jax import paths
  articles = wikipedia_documents(120)
  for part in range(4):
    lines = ''.join(json.dumps({'id': i, 'text': a}) + '\n' for i, a in enumerate(articles[part::4]))
    paths.path(f'{bucket}/corpus/part-{part}.jsonl.zst').write_bytes(zstandard.compress(lines.encode()))

  run(substitute(vocab, here), '--vocab_size=4000', '--max_sentences=20000')  # 120 articles hold no 30,000 pieces
  assert paths.path(f'{bucket}/vocab.model').exists()
  run(substitute(prepare, here))
  assert list(paths.path(f'{bucket}/corpus/.albert_index').glob('*/*'))  # kept beside the corpus
  out = run(substitute(inspect, here), '--config.model.vocab_size=4000')
  assert 'host 5 of 8' in out and '[MASK' in out, out[-3000:]
  out = run(substitute(fit, here))  # as written: ALBERT-base at the paper's batch, on a v3-64
  assert 'train: auto: model.remat none and train.grad_accum_steps 2 (with 1 microbatch' in out, out[-3000:]

  # The pod: gcloud is the recording stand-in (conftest.py); the worker's python writes down how it was started.
  run(substitute(create, here))
  run(substitute(setup_pod, here))
  split = babysit.index('--')  # the babysitter's own polling, not to wait a minute here
  out = run(substitute(babysit[:split] + ['--poll_seconds=0'] + babysit[split:], here))
  assert 'nothing is training on the pod: starting it' in out and 'training finished (exit code 0)' in out
  run(substitute(logs, here), cwd=tmp_path)  # (the stand-in's streams end at once, so it returns)
  assert sorted(p.name for p in (tmp_path / 'logs' / 'albert').iterdir()) == [f'worker-{k}.log' for k in range(8)]
  assert 'worker 0: exit code 0 (finished)' in run(substitute(status, here))
  started = json.loads((worker / 'argv.json').read_text())['argv']
  assert started[:2] == ['-m', 'albert_jax.train'] and '--distributed' in started
  assert f"--config.data.source=jsonl:{bucket}/corpus/*.jsonl.zst" in started
  assert f'--config.data.vocab={bucket}/vocab.model' in started

  # What the workers were told to run, run here as one host (so without --distributed) into the bucket.
  out = run(['python'] + [a for a in started if a != '--distributed'], *BASE_SHRUNK, *PRETRAIN_SMALL)
  assert 'step 8/8' in out
  assert 'goodput' in run(substitute(goodput, here))
  run(substitute(export_hf, here))
  exported = paths.path(f'{bucket}/export/base_hf')
  assert (exported / 'spiece.model').read_bytes() == paths.path(f'{bucket}/vocab.model').read_bytes()
  assert json.loads((exported / 'config.json').read_text())['vocab_size'] == 4000
  recorded = len(calls())
  run(substitute(delete, here))
  assert [c[3:5] for c in calls()[recorded:]] == [['delete', 'albert']]

  # GLUE from the bucket: the Hub's sst2/ folder (the network's part made here), copied up by gcloud (the
  # stand-in copies for real), fine-tuned as on the worker.
  download, copy, ssh = setup
  assert ("snapshot_download('nyu-mll/glue', repo_type='dataset', allow_patterns='sst2/*', local_dir='glue')"
          in download[2])
  sst2_hub(tmp_path / 'glue')
  subprocess.run(substitute(copy, here), check=True, cwd=tmp_path)
  assert paths.path(f'{bucket}/glue/sst2/train-00000-of-00001.parquet').exists()
  assert ssh[:6] == ['gcloud', 'compute', 'tpus', 'tpu-vm', 'ssh', 'albert-ft']
  assert on_the_worker[0] == ['export', 'BUCKET=my-albert-bucket']
  [finetune] = on_the_worker[1:]
  run(substitute(finetune, here), *FINETUNE_SMALL)
  result = json.loads(paths.path(f'{bucket}/runs/base_sst2/result.json').read_text())
  assert result['eval_accuracy_count'] == 40


def wikipedia_hub(folder, articles: list) -> None:
  """What `snapshot_download('wikimedia/wikipedia', allow_patterns='20231101.en/*')` leaves, made of real articles:
  20231101.en/train-0000N-of-00002.parquet with the dataset's columns id, url, title and text."""
  import pyarrow as pa
  import pyarrow.parquet as pq
  (folder / '20231101.en').mkdir(parents=True)
  for part in range(2):
    rows = [{'id': str(i), 'url': f'https://en.wikipedia.org/wiki?curid={i}', 'title': text.split('.')[0][:40],
             'text': text} for i, text in enumerate(articles[part::2])]
    pq.write_table(pa.Table.from_pylist(rows), folder / '20231101.en' / f'train-{part:05d}-of-00002.parquet',
                   row_group_size=16)


def test_tpu_pods_from_nothing(tmp_path, bucket, gcloud, monkeypatch):
  """docs/pods.md's headline as written: the variables, project, bucket and credentials, Wikipedia from the Hub
  (its Parquet layout made of real articles) copied up, the vocabulary and index from the bucket, the fit check, the
  pod (create, setup, babysit in the background, logs, status); what the workers were told runs here as one host on
  the bucket's Parquet files. Then the TFDS block: its Dataflow options as TFDS documents them, and the pod started
  with the TFDS folder. Runs are shrunk by sizes, steps and batch appended after the page's own, nothing else."""
  commands = command_block('pods.md', 0)
  assert [tool(c) for c in commands] == [
      'export', 'gcloud', 'gcloud', 'gcloud', 'pip', 'python', 'gcloud', 'albert_jax.data.vocab',
      'albert_jax.data.prepare', 'albert_jax.aot', 'launch.tpu', 'launch.tpu', 'launch.tpu', 'launch.tpu',
      'launch.tpu']
  (export, project, make_bucket, credentials, install, download, copy, vocab, prepare, fit, create, setup_pod,
   babysit, logs, status) = commands
  assert [c[3] for c in (create, setup_pod, babysit, logs, status)] == ['create', 'setup', 'babysit', 'logs', 'status']
  here = {**variables(export), '$BUCKET': bucket[len('gs://'):]}
  calls, worker = gcloud
  monkeypatch.setenv('GCLOUD_WORKERS', '128')  # a v3-1024's hosts, the list's first
  for command in (project, make_bucket, credentials):
    subprocess.run(substitute(command, here), check=True)
  assert calls()[-2:] == [['storage', 'buckets', 'create', bucket, '--location=europe-west4'],
                          ['auth', 'application-default', 'login']]
  assert install == ['pip', 'install', '-e', '.[tpu]', 'huggingface_hub']

  # The Hub without the network: the download's folder as it lands, copied up by gcloud (the stand-in copies).
  assert ("snapshot_download('wikimedia/wikipedia', repo_type='dataset', allow_patterns='20231101.en/*', "
          "local_dir='wikipedia')" in download[2])
  wikipedia_hub(tmp_path / 'wikipedia', wikipedia_documents(120))
  subprocess.run(substitute(copy, here), check=True, cwd=tmp_path)
  from albert_jax import paths
  assert paths.path(f'{bucket}/wikipedia/20231101.en/train-00001-of-00002.parquet').exists()
  run(substitute(vocab, here), '--vocab_size=4000', '--max_sentences=20000')  # 120 articles hold no 30,000 pieces
  run(substitute(prepare, here))
  assert list(paths.path(f'{bucket}/wikipedia/20231101.en/.albert_index').glob('*/*'))
  # The fit check as written but for xxlarge's sizes (test_every_pod_training_command_shown_fits_its_slice compiles
  # the real one for the v3-512): it says what training will take.
  out = run(substitute(fit, here), *BASE_SHRUNK, '--config.data.max_seq_length=64')
  assert re.search(r'train: auto: model\.remat none and train\.grad_accum_steps 1 \(as configured, it fits', out), out

  run(substitute(create, here))
  run(substitute(setup_pod, here))
  split = babysit.index('--')
  out = run(substitute(babysit[:split] + ['--poll_seconds=0'] + babysit[split:], here))
  assert 'training finished (exit code 0)' in out
  run(substitute(logs, here), cwd=tmp_path)
  assert len(list((tmp_path / 'logs' / 'albert').iterdir())) == 128
  assert 'worker 0: exit code 0 (finished)' in run(substitute(status, here))
  started = json.loads((worker / 'argv.json').read_text())['argv']
  assert f'--config.data.source=parquet:{bucket}/wikipedia/20231101.en/*.parquet' in started
  out = run(['python'] + [a for a in started if a != '--distributed'], *BASE_SHRUNK, *PRETRAIN_SMALL)
  assert 'step 8/8' in out
  assert json.loads(paths.path(f'{bucket}/runs/xxlarge/result.json').read_text())['step'] == 8

  # The TFDS way: Beam on Dataflow into the bucket (not run here: no network, no Dataflow), then the pod reading
  # the default mix from the TFDS folder, which reaches every worker as TFDS_DATA_DIR.
  tfds_install, requirements, build_wikipedia, build_books, tfds_vocab, tfds_babysit = command_block('pods.md', 1)
  assert tfds_install[:4] == ['pip', 'install', '-e', '.[tpu,tf]'] and 'apache-beam[gcp]' in tfds_install
  assert requirements == ['echo', 'tensorflow_datasets[wikipedia]']
  options = dict(o.split('=', 1) for o in substitute(build_wikipedia, here)[-1].split('=', 1)[1].split(','))
  assert build_wikipedia[:3] == ['tfds', 'build', 'wikipedia/20230601.en'] and options == {
      'runner': 'DataflowRunner', 'project': 'my-project', 'job_name': 'wikipedia-en',
      'staging_location': f'{bucket}/binaries', 'temp_location': f'{bucket}/temp', 'region': 'europe-west4',
      'requirements_file': '/tmp/beam_requirements.txt'}
  assert substitute(build_books, here) == ['tfds', 'build', 'pg19', f'--data_dir={bucket}/tfds']
  assert f'--tfds_data_dir={bucket}/tfds' in substitute(tfds_vocab, here)
  from albert_jax.config import defaults
  assert tfds_vocab[3] == f'--input={defaults().data.source}'  # the corpus training will read
  (worker / 'albert_run' / 'exit_code').unlink()  # a pod on which nothing has run yet: babysit starts training
  split = tfds_babysit.index('--')
  out = run(substitute(tfds_babysit[:split] + ['--poll_seconds=0'] + tfds_babysit[split:], here))
  assert 'nothing is training on the pod: starting it' in out
  assert json.loads((worker / 'argv.json').read_text())['tfds'] == f'{bucket}/tfds'


def pod_training_commands() -> list:
  """(page, launch.tpu's arguments) for every `python -m launch.tpu train` or `babysit` line in a code block of the
  README, docs/ or launch/README.md (a console block's `$ ` prompt dropped), up to its first shell operator."""
  found = []
  for page in [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md')), ROOT / 'launch' / 'README.md']:
    for block in re.findall(r'```[a-z]*\n(.*?)```', page.read_text(), re.S):
      for line in block.replace('\\\n', ' ').splitlines():
        line = line.strip().removeprefix('$ ')
        if re.match(r'python -m launch\.tpu +(train|babysit) ', line):
          argv = shlex.split(line, comments=True)
          found.append((str(page.relative_to(ROOT)),
                        argv[3:next((i for i, a in enumerate(argv) if a in SHELL), len(argv))]))
  return found


def test_every_pod_training_command_shown_fits_its_slice():
  """Each pod training command a page shows, its config, overrides and accelerator as written, passes the fit
  check that training makes on the slice before step 1: the argv launch.tpu starts on every worker, its config
  parsed as train.py parses it, the step compiled for the slice's devices (libtpu's compile-only ones, as `aot`
  does) by fit.choose. A setting given that does not fit fails here, not on a rented pod; 'auto' must find one."""
  from absl import flags
  from ml_collections import config_flags
  from albert_jax import aot, fit
  from launch import tpu
  shown = pod_training_commands()
  assert {page for page, _ in shown} >= {'docs/pods.md', 'docs/your_corpus_on_a_pod.md', 'docs/fit.md',
                                         'launch/README.md'}, shown
  checked = {}
  for page, argv in shown:
    args = tpu.parse(argv)
    train = tpu.training_argv(args)
    train = train[train.index('python') + 3:]  # after python -m albert_jax.train
    config_args = [a for a in train if a.startswith('--config')]
    slices = args.num_slices
    argv_of_train, values = ['train', *config_args], flags.FlagValues()
    config_flags.DEFINE_config_file('config', flag_values=values, sys_argv=argv_of_train, lock_config=True)
    values(argv_of_train)
    listed = [aot.topology(f'{slices}x{a}' if slices > 1 else a) for a in args.accelerator.split(',')]
    for topo in listed:  # a run babysat over a list moves between them: its global batch spreads over each
      assert values.config.train.batch_size % topo.devices == 0, (page, argv, topo.name)
    assert len(listed) == 1 or ' not on ' not in aot.moves(values.config, listed), (page, argv)  # data shards too
    # The fit check compiles for the list's smallest slice only: the same generation's larger ones hold no more per
    # device (a smaller share of the same global batch, the same or fewer microbatches), so a fit there is one here.
    topo = min(listed, key=lambda t: t.devices)
    key = (topo.name, tuple(a for a in config_args if not a.startswith(('--config.data.source', '--config.data.vocab'))))
    if key not in checked:
      devices = topo.compile_only_devices()
      try:
        _, found, said = fit.choose(values.config, devices, f' of {topo.name}',
                                    try_config=lambda c: aot.check(c, topo))
      except Exception as e:  # pylint: disable=broad-except
        pytest.fail(f'{page}: {shlex.join(argv)}: {e}')
      checked[key] = (found.fits, said)
    assert checked[key][0], (page, argv, checked[key])
  assert len(checked) >= 3, checked  # xxlarge on a v3-512 (of v3-1024,v3-512), base on a v3-64, xxlarge on 2 v5e-256


def test_reproduce_the_papers_tables(tmp_path, tiny_config):
  """The README's table, Table 10 in miniature, shrunk further to the tiny config: its two depths, and the report
  with each run's paper setting and figures beside ours."""
  [table] = command_block('../README.md', under="## Reproduce the paper's tables")
  assert tool(table) == 'launch.sweep' and '--sweep=configs/sweeps/table10_depth.py' in table and '--miniature' in table
  here = {'/tmp/': f'{tmp_path}/'}
  shrink = ['--config=configs/tiny.py', '--config.data.max_seq_length=64', '--config.train.batch_size=8',
            '--config.train.num_steps=4', '--config.train.warmup_steps=1', '--config.train.eval_every=4',
            '--config.train.checkpoint_every=4', '--config.train.eval_batches=1',
            f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}']
  out = run(substitute(table, here), *shrink)
  assert out.count('python -m albert_jax.train') == 2  # 4 and 8 layers (the paper's 12 and 24), one after another
  run(substitute(table, here), '--report')  # as the page shows: the table of what finished
  report = (tmp_path / 'table10' / 'report.md').read_text()
  rows = [line for line in report.splitlines() if line.startswith('| num_layers=')]
  assert [row.split(' | ')[0] for row in rows] == ['| num_layers=4', '| num_layers=8']
  assert all('| 88.7 |' in row for row in rows) and 'num_layers=12' in rows[0] and 'num_layers=24' in rows[1]
  assert (tmp_path / 'table10' / 'report.png').read_bytes()[:4] == b'\x89PNG'
