"""The journeys the README routes to (docs/laptop.md, docs/from_a_checkpoint.md, docs/your_corpus_on_a_pod.md, and
the paper's tables from the README itself), run as shown: each page's command block is read from the page and run
in order, with only what cannot exist here replaced (the network: pip, git clone and HF's hub; the pod: gcloud, by
the recording stand-in of conftest.py; Cloud Storage: the GCS server on 127.0.0.1) and each run shrunk by
overrides appended after the page's own (fewer steps, shorter sequences). A command added to a page, or one whose
flags no longer work, fails here."""
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

from conftest import ROOT

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


def command_block(page: str, block: int = 0, under: str = '') -> list:
  """The `block`-th bash block of docs/PAGE (after the heading `under`, if given) as argv lists, one per command
  (continuation lines joined)."""
  text = (ROOT / 'docs' / page).read_text()
  text = text[text.index(under):] if under else text
  code = re.findall(r'```bash\n(.*?)```', text, re.S)[block]
  return [shlex.split(line) for line in code.replace('\\\n', ' ').splitlines() if line.strip()]


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
  env = {**os.environ, 'PYTHONPATH': str(ROOT), 'XLA_FLAGS': '--xla_force_host_platform_device_count=1'}
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
  assert [tool(c) for c in commands] == ['pip', 'python', 'albert_jax.data.inspect', 'albert_jax.train',
                                         'albert_jax.finetune']
  install, download, inspect, pretrain, finetune = commands
  assert install == ['pip', 'install', '-e', '.[hf]']
  # HF's hub, without the network: an AlbertForMaskedLM folder as snapshot_download leaves it (config.json,
  # model.safetensors, spiece.model), of a small shape and the built-in vocabulary.
  assert download[1] == '-c'
  assert "snapshot_download('albert/albert-base-v2', local_dir='/tmp/albert-base-v2')" in download[2]
  released = tmp_path / 'albert-base-v2'
  transformers.AlbertForMaskedLM(transformers.AlbertConfig(
      vocab_size=builtin_tokenizer.vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=2,
      num_attention_heads=2, intermediate_size=64)).save_pretrained(released)
  (released / 'spiece.model').write_bytes(builtin_tokenizer.sp.serialized_model_proto())
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
  glue = sst2_slice(tmp_path / 'glue')
  run(substitute(finetune, here), *FINETUNE_SMALL, f'--config.task.data={glue}')
  result = json.loads((tmp_path / 'albert_domain_sst2' / 'result.json').read_text())
  assert result['eval_accuracy_count'] == 40  # the slice's dev rows


def test_your_corpus_on_a_pod(tmp_path, bucket, gcloud, monkeypatch):
  commands, on_the_worker = command_block('your_corpus_on_a_pod.md', 0), command_block('your_corpus_on_a_pod.md', 1)
  assert [tool(c) for c in commands] == [
      'albert_jax.data.vocab', 'albert_jax.data.prepare', 'albert_jax.data.inspect', 'albert_jax.aot',
      'launch.tpu', 'launch.tpu', 'launch.tpu', 'launch.tpu', 'launch.tpu', 'albert_jax.convert', 'launch.tpu']
  vocab, prepare, inspect, fit, create, setup, start, babysit, logs, export, delete = commands
  assert [c[3] for c in (create, setup, start, babysit, logs, delete)] == [
      'create', 'setup', 'train', 'babysit', 'logs', 'delete']
  assert start[4:] == babysit[4:]  # the babysitter restarts the very command that was started
  assert on_the_worker[0][0] == 'cd' and [tool(c) for c in on_the_worker[1:]] == ['albert_jax.finetune']

  # The corpus in the bucket: JSON lines compressed with zstandard, the text in the field `text`.
  import zstandard
  from albert_jax import paths
  articles = wikipedia_documents(120)
  for part in range(4):
    lines = ''.join(json.dumps({'id': i, 'text': a}) + '\n' for i, a in enumerate(articles[part::4]))
    paths.path(f'{bucket}/corpus/part-{part}.jsonl.zst').write_bytes(zstandard.compress(lines.encode()))
  # ALBERT-base's shape is shrunk to the tiny config's (4,000 pieces) for this machine; all else is the page's.
  here = {'gs://BUCKET': bucket, 'configs/base.py': 'configs/tiny.py', '--vocab_size=30000': '--vocab_size=4000'}

  run(substitute(vocab, here), '--max_sentences=20000')
  assert paths.path(f'{bucket}/vocab.model').exists()
  run(substitute(prepare, here), '--processes=2')
  assert list(paths.path(f'{bucket}/corpus/.albert_index').glob('*/*'))  # kept beside the corpus
  out = run(substitute(inspect, here))
  assert 'host 5 of 8' in out and '[MASK' in out, out[-3000:]
  out = run(substitute(fit, here))
  assert 'v3-64' in out

  # The pod: gcloud is the recording stand-in (conftest.py); the worker's python writes down how it was started.
  calls, worker = gcloud
  monkeypatch.setenv('GCLOUD_EXIT_CODE', '0')
  run(substitute(create, here))
  run(substitute(setup, here))
  run(substitute(start, here))
  deadline = time.time() + 60
  while not (worker / 'albert_run' / 'exit_code').exists():  # the workers' command runs detached
    assert time.time() < deadline
    time.sleep(0.1)
  split = babysit.index('--')  # the babysitter's own polling, not to wait a minute here
  run(substitute(babysit[:split] + ['--poll_seconds=0'] + babysit[split:], here))
  run(substitute(logs, here), f'--log_dir={tmp_path}/logs')
  verbs = [' '.join(c[3:5]) for c in calls() if c[:3] == ['compute', 'tpus', 'tpu-vm']]
  assert verbs[0] == 'create albert' and verbs[1].startswith('scp') and 'describe albert' in verbs
  # `logs` follows the v3-64's 8 hosts, a file each (the stand-in's streams end at once, so it returns).
  assert sorted(p.name for p in (tmp_path / 'logs' / 'albert').iterdir()) == [f'worker-{k}.log' for k in range(8)]
  started = json.loads((worker / 'argv.json').read_text())['argv']
  assert started[:2] == ['-m', 'albert_jax.train'] and '--distributed' in started
  assert f"--config.data.source=jsonl:{bucket}/corpus/*.jsonl.zst" in started
  assert f'--config.data.vocab={bucket}/vocab.model' in started

  # What the workers were told to run, run here as one host (so without --distributed) into the bucket.
  out = run(['python'] + [a for a in started if a != '--distributed'], *PRETRAIN_SMALL)
  assert 'step 8/8' in out
  run(substitute(export, here))
  exported = paths.path(f'{bucket}/export/base_hf')
  assert (exported / 'spiece.model').read_bytes() == paths.path(f'{bucket}/vocab.model').read_bytes()
  assert json.loads((exported / 'config.json').read_text())['vocab_size'] == 4000
  recorded = len(calls())
  run(substitute(delete, here))
  deleted = calls()[recorded:]
  assert [c[3:5] for c in deleted] == [['delete', 'albert']]

  glue = sst2_slice(tmp_path / 'glue')
  run(substitute(on_the_worker[1], here), *FINETUNE_SMALL, f'--config.task.data={glue}')
  result = json.loads(paths.path(f'{bucket}/runs/base_sst2/result.json').read_text())
  assert result['eval_accuracy_count'] == 40


def test_reproduce_the_papers_tables(tmp_path, tiny_config):
  [table4] = command_block('../README.md', under="## Reproduce the paper's tables")
  assert tool(table4) == 'launch.sweep' and '--sweep=configs/sweeps/table4_embedding.py' in table4
  here = {'/tmp/': f'{tmp_path}/'}
  shrink = ['--config.data.max_seq_length=64', '--config.train.batch_size=8', '--config.train.num_steps=4',
            '--config.train.warmup_steps=1', '--config.train.eval_every=4', '--config.train.checkpoint_every=4',
            '--config.train.eval_batches=1', f'--config.data.tfds_data_dir={tiny_config.data.tfds_data_dir}']
  out = run(substitute(table4, here), *shrink)
  assert out.count('python -m albert_jax.train') == 4  # E 8, 16, 32 and 64, one after another
  run(substitute(table4, here), '--report')  # as docs/sweeps.md shows: the table and the plot of what finished
  report = (tmp_path / 'table4' / 'report.md').read_text()
  rows = [line for line in report.splitlines() if line.startswith('| embedding_size=')]
  assert [row.split(' | ')[0] for row in rows] == [f'| embedding_size={e}' for e in (8, 16, 32, 64)]
  assert '79.8' in rows[0] and '80.1' in rows[1]  # the paper's Avg beside ours
  assert (tmp_path / 'table4' / 'report.png').read_bytes()[:4] == b'\x89PNG'
