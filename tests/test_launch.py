"""launch/tpu.py against a recording stand-in for gcloud on PATH: the exact command lines for v3-64 and v3-1024, the
babysit loop through a preemption, and awkward override values arriving at the remote python unchanged."""
import json
import os
import re
import shlex
import subprocess
import sys
import time

import pytest

from albert_jax import accelerators
from conftest import ROOT
from launch import tpu


def dry_run(*argv) -> list:
  out = subprocess.run([sys.executable, '-m', 'launch.tpu', argv[0], '--dry-run', *argv[1:]], cwd=ROOT, capture_output=True,
                       text=True, check=True).stdout
  return out.splitlines()


COMMON = ['--name=albert', '--zone=europe-west4-a']
RUN = ['--config=configs/xxlarge.py', '--workdir=gs://my-bucket/xxlarge', '--tfds_data_dir=gs://my-bucket/tfds']
AWKWARD = ['--config.train.fill_mask_text=it\'s $HOME; rm -rf "/" `id` $(touch pwned) & echo',
           '--config.train.fill_mask_word=it\'s']


def test_create_on_v3_64_and_v3_1024_dry_runs():
  assert dry_run('create', *COMMON, '--accelerator=v3-64') == [
      'gcloud compute tpus tpu-vm create albert --zone=europe-west4-a --accelerator-type=v3-64 '
      '--version=tpu-ubuntu2204-base']
  assert dry_run('create', *COMMON, '--accelerator=v3-1024', '--capacity=preemptible', '--project=p1') == [
      'gcloud compute tpus tpu-vm create albert --zone=europe-west4-a --project=p1 --accelerator-type=v3-1024 '
      '--version=tpu-ubuntu2204-base --preemptible']
  assert dry_run('create', *COMMON, '--accelerator=v3-1024', '--queued', '--capacity=spot') == [
      'gcloud compute tpus queued-resources create albert --node-id=albert --zone=europe-west4-a '
      '--accelerator-type=v3-1024 --runtime-version=tpu-ubuntu2204-base --spot']


@pytest.mark.parametrize('accelerator', ['v3-64', 'v3-1024'])
def test_train_dry_run_pins_the_remote_command_with_an_awkward_override(accelerator):
  lines = dry_run('train', *COMMON, f'--accelerator={accelerator}', *RUN, '--', *AWKWARD)
  assert lines[1].startswith('#   remote shell: pkill') and lines[3].startswith('#   remote shell: mkdir')
  assert lines[::2] == [
      'gcloud compute tpus tpu-vm ssh albert --zone=europe-west4-a --worker=all \'--command=pkill -f '
      '"[a]lbert_jax.train"; for i in $(seq 90); do pgrep -f "[a]lbert_jax.train" > /dev/null || break; sleep 1; '
      'done; pkill -9 -f "[a]lbert_jax.train" || true; sudo lsof -t /dev/accel* /dev/vfio/* 2>/dev/null | xargs -r '
      'sudo kill -9 || true\'',
      'gcloud compute tpus tpu-vm ssh albert --zone=europe-west4-a --worker=all ' + shlex.quote(
          '--command=mkdir -p $HOME/albert_run && cd $HOME/albert_jax && rm -f $HOME/albert_run/exit_code && '
          '{ nohup bash -c \'"$0" "$@" > $HOME/albert_run/train.log 2>&1; echo $? > $HOME/albert_run/exit_code\' '
          'env TFDS_DATA_DIR=gs://my-bucket/tfds "$HOME/albert_jax/.venv/bin/python" -m albert_jax.train '
          '--config=configs/xxlarge.py --workdir=gs://my-bucket/xxlarge --distributed ' +
          ' '.join(shlex.quote(x) for x in AWKWARD) + ' < /dev/null > /dev/null 2>&1 & }')]


def test_awkward_overrides_reach_the_remote_python_unchanged(gcloud, tmp_path):
  calls, worker_home = gcloud
  tpu.main(['train', *COMMON, '--accelerator=v3-64', *RUN, '--', *AWKWARD, '--config.train.num_steps=7'])
  deadline = time.time() + 30
  while not (worker_home / 'albert_run' / 'exit_code').exists():  # the remote command runs detached
    assert time.time() < deadline
    time.sleep(0.05)
  started = json.loads((worker_home / 'argv.json').read_text())
  assert started['argv'] == ['-m', 'albert_jax.train', '--config=configs/xxlarge.py',
                             '--workdir=gs://my-bucket/xxlarge', '--distributed', *AWKWARD,
                             '--config.train.num_steps=7']
  assert started['tfds'] == 'gs://my-bucket/tfds'
  assert (worker_home / 'albert_run' / 'exit_code').read_text().strip() == '0'
  assert not list(tmp_path.rglob('pwned')) and not (ROOT / 'pwned').exists()
  assert [c[:5] for c in calls()] == [['compute', 'tpus', 'tpu-vm', 'ssh', 'albert']] * 2


def test_babysit_recreates_a_preempted_pod_and_stops_when_training_ends(gcloud, tmp_path, monkeypatch):
  calls, worker_home = gcloud
  (tmp_path / 'states').write_text('PREEMPTED CREATING READY')
  monkeypatch.setenv('GCLOUD_EXIT_CODE', '0')
  with pytest.raises(SystemExit) as ended:
    tpu.main(['babysit', *COMMON, '--accelerator=v3-64', *RUN, '--poll_seconds=0', '--delete_when_done'])
  assert ended.value.code == 0
  verbs = [' '.join(c[2:4]) if c[2] in ('tpu-vm', 'queued-resources') else ' '.join(c[:2]) for c in calls()]
  assert verbs == ['tpu-vm describe',  # PREEMPTED
                   'storage ls', 'storage cat',  # the newest whole checkpoint, the last step: the restart's line
                   'tpu-vm delete', 'tpu-vm create', 'tpu-vm scp', 'tpu-vm ssh',  # re-create and install
                   'tpu-vm ssh', 'tpu-vm ssh',  # stop stale processes, start training
                   'tpu-vm describe',  # CREATING: wait
                   'tpu-vm describe', 'tpu-vm ssh',  # READY: every worker's training exited 0
                   'tpu-vm delete']
  assert (worker_home / 'argv.json').exists()


def test_babysit_restarts_with_backoff_while_no_checkpoint_comes_and_gives_up_at_the_budget(gcloud, tmp_path,
                                                                                               monkeypatch):
  """Every worker's training keeps ending with status 42 and no whole checkpoint appears (the stand-in's bucket
  lists none that can be read): each restart is one line; from the second on babysit waits first, twice as long
  each time; at --max_restarts it gives up, naming the last cause."""
  calls, _ = gcloud
  monkeypatch.setenv('GCLOUD_EXIT_CODE', '42')
  slept = []
  monkeypatch.setattr(tpu.time, 'sleep', slept.append)
  with pytest.raises(SystemExit) as ended:
    tpu.main(['babysit', *COMMON, '--accelerator=v3-64', *RUN, '--poll_seconds=5', '--max_restarts=4'])
  assert str(ended.value).startswith('albert: gave up after 4 restarts (--max_restarts); the last: worker 0: exit '
                                     'code 42 (restartable), at step 7')
  starts = [c for c in calls() if c[3:4] == ['ssh'] and any('nohup' in a for a in c)]
  assert len(starts) == 4  # the four restarts (nothing else started training)
  assert slept == [0, 5, 5, 5, 10, 5, 20, 5]  # each restart's backoff (none, then doubling), then the poll's 5 s


def worker(number, code=None, alive=False, last=''):
  return tpu.Worker(f'worker {number}', str(number), code, alive, None, last)


@pytest.mark.parametrize('states, verdict, about', [
    ([(0, True), (None, True)], 'running', []),
    ([(0, False), (0, False)], 'finished', [0, 1]),
    ([(None, True), (0, False)], 'running', []),  # one still ending
    ([(42, False), (None, False)], 'restart', [1]),  # worker 1 is gone (no exit code): it is where it began
    ([(42, False), (137, False)], 'restart', [1]),  # killed by a signal
    ([(42, False), (None, True)], 'restart', [0]),  # a hang ended on worker 0 while worker 1 waits
    ([(2, False), (42, False)], 'bad input', [0]),  # never restarted
    ([(1, False), (42, False)], 'bug', [0]),  # a person must look
    ([(None, False), (None, False)], 'idle', [0, 1]),  # nothing started, or the machines rebooted
])
def test_babysit_judges_every_workers_state(states, verdict, about):
  found = [worker(i, code, alive) for i, (code, alive) in enumerate(states)]
  what, which = tpu.judge(found, hosts=2)
  assert (what, [int(w.id) for w in which]) == (verdict, about)
  assert tpu.judge(found[:1], hosts=2) == ('unknown', [])  # a worker that did not answer: ask again


def test_logs_stream_every_worker(tmp_path):
  lines = dry_run('logs', *COMMON, '--accelerator=v3-64', f'--log_dir={tmp_path}')
  assert len(lines) == 16  # 64 cores, 8 per TPU VM host; each line followed by its remote command
  assert lines[14] == ('gcloud compute tpus tpu-vm ssh albert --zone=europe-west4-a --worker=7 '
                      '\'--command=tail -n +1 -F $HOME/albert_run/train.log\'')


def test_workers_per_pod():
  names = ('v3-8', 'v3-64', 'v3-1024', 'v4-128', 'v5e-8', 'v5litepod-256', 'v5p-8', 'v5p-128', 'v6e-8', 'v6e-256',
           'tpu7x-8', 'tpu7x-16', 'tpu7x-128')
  assert [accelerators.tpu_slice(a).hosts for a in names] == [1, 8, 128, 16, 1, 64, 1, 16, 1, 64, 1, 2, 16]


@pytest.mark.parametrize('accelerator, gcloud_name, runtime', [
    # Cloud TPU's software versions for JAX (cloud.google.com/tpu/docs/runtimes); v5e is named v5litepod there.
    ('v4-128', 'v4-128', 'tpu-ubuntu2204-base'), ('v5e-256', 'v5litepod-256', 'v2-alpha-tpuv5-lite'),
    ('v5p-128', 'v5p-128', 'v2-alpha-tpuv5'), ('v6e-256', 'v6e-256', 'v2-alpha-tpuv6e')])
def test_create_on_every_generation_dry_runs(accelerator, gcloud_name, runtime):
  assert dry_run('create', *COMMON, f'--accelerator={accelerator}') == [
      f'gcloud compute tpus tpu-vm create albert --zone=europe-west4-a --accelerator-type={gcloud_name} '
      f'--version={runtime}']
  assert dry_run('create', *COMMON, f'--accelerator={accelerator}', '--queued', '--capacity=spot') == [
      f'gcloud compute tpus queued-resources create albert --node-id=albert --zone=europe-west4-a '
      f'--accelerator-type={gcloud_name} --runtime-version={runtime} --spot']
  assert dry_run('create', *COMMON, f'--accelerator={accelerator}', '--version=v2-alpha-tpuv6e-custom')[0].endswith(
      '--version=v2-alpha-tpuv6e-custom')


def test_two_slices_are_created_together_and_every_command_reaches_both():
  slices = [*COMMON, '--accelerator=v5litepod-256', '--num_slices=2']
  assert dry_run('create', *slices) == [
      'gcloud compute tpus queued-resources create albert --node-count=2 --node-prefix=albert --zone=europe-west4-a '
      '--accelerator-type=v5litepod-256 --runtime-version=v2-alpha-tpuv5-lite']
  train = dry_run('train', *slices, *RUN, '--', '--config.model.remat=full')[::2]
  assert [line.split()[5] for line in train] == ['albert-0', 'albert-1', 'albert-0', 'albert-1']  # stop, then start
  assert all('--worker=all' in line for line in train)
  assert '--distributed --config.mesh.dcn_data=2 --config.model.remat=full' in train[2] and train[2][-60:] == \
      train[3][-60:]
  logs = dry_run('logs', *slices, '--log_dir=/tmp/albert_logs')[::2]
  assert len(logs) == 128 and logs[64].split()[5:8] == ['albert-1', '--zone=europe-west4-a', '--worker=0']
  assert dry_run('delete', *slices) == [
      'gcloud compute tpus queued-resources delete albert --zone=europe-west4-a --force --quiet']
  status = dry_run('status', *slices)
  assert sum('tpu-vm describe albert-' in line for line in status) == 2


def test_slices_that_cannot_be_joined_are_refused():
  out = subprocess.run([sys.executable, '-m', 'launch.tpu', 'create', '--dry-run', *COMMON, '--accelerator=v3-64',
                        '--num_slices=2'], cwd=ROOT, capture_output=True, text=True)
  assert out.returncode == 2 and 'v3 slices cannot be joined (multislice is v4 and later)' in out.stderr
  out = subprocess.run([sys.executable, '-m', 'launch.tpu', 'create', '--dry-run', *COMMON, '--accelerator=v5p-96'],
                       cwd=ROOT, capture_output=True, text=True)
  assert out.returncode == 2 and 'v5p-96: the size must be a power of two' in out.stderr


def test_bad_arguments_are_refused_before_any_gcloud_call(gcloud):
  calls, _ = gcloud
  with pytest.raises(SystemExit):
    tpu.main(['train', *COMMON, '--accelerator=v3-64'])  # no workdir
  with pytest.raises(SystemExit):
    tpu.main(['train', *COMMON, '--accelerator=v3-64', '--workdir=/tmp/run'])  # not shared by the workers
  assert calls() == []


def test_status_stop_and_delete_dry_runs():
  assert dry_run('delete', *COMMON, '--accelerator=v3-64') == [
      'gcloud compute tpus tpu-vm delete albert --zone=europe-west4-a --quiet']
  assert dry_run('delete', *COMMON, '--accelerator=v3-64', '--queued') == [
      'gcloud compute tpus queued-resources delete albert --zone=europe-west4-a --force --quiet']
  status = dry_run('status', *COMMON, '--accelerator=v3-64', '--queued')
  assert status[0] == 'gcloud compute tpus queued-resources describe albert --zone=europe-west4-a'
  assert status[1] == ('gcloud compute tpus tpu-vm describe albert --zone=europe-west4-a '
                       "'--format=value(state,health,acceleratorType)'")
  assert status[2].startswith('gcloud compute tpus tpu-vm ssh albert --zone=europe-west4-a --worker=all')
  stop = dry_run('stop', *COMMON, '--accelerator=v3-64')
  assert stop[0].startswith('gcloud compute tpus tpu-vm ssh albert') and 'pkill -f "[a]lbert_jax.train"' in stop[1]


PYENV = os.path.expanduser('~/.pyenv/versions')


@pytest.mark.skipif(not (os.path.isdir(f'{PYENV}/3.10.13') and os.path.isdir(f'{PYENV}/3.12.1')),
                    reason="needs pyenv's Python 3.10 and 3.12 to stand in for a TPU image's and a newer one")
def test_worker_setup_brings_a_supported_python_and_is_safe_to_rerun(tmp_path):
  """launch/worker_setup.sh on a stand-in worker whose python3 is 3.10, as on the v2-v6e images (Ubuntu 22.04),
  with a Python 3.12 elsewhere on it, as uv or apt would bring: it installs uv from PyPI, takes the 3.12 through
  `uv python find` (downloads of Pythons are off here: nothing outside the package registries), makes the venv
  with it and installs the project there (PIP_NO_DEPS: the full stack's install is CI's own); a rerun keeps the
  venv, and one on a worker left half set up makes it anew."""
  bin_dir, home, venv = tmp_path / 'bin', tmp_path / 'home', tmp_path / 'venv'
  bin_dir.mkdir()
  home.mkdir()
  (bin_dir / 'python3').symlink_to(f'{PYENV}/3.10.13/bin/python3.10')
  (bin_dir / 'python3.12').symlink_to(f'{PYENV}/3.12.1/bin/python3.12')
  for tool in ('sed', 'rm', 'dirname', 'mkdir', 'uname', 'cat', 'ls'):  # nothing else with a python on PATH
    (bin_dir / tool).symlink_to(subprocess.check_output(['bash', '-c', f'command -v {tool}'], text=True).strip())
  env = {'PATH': str(bin_dir), 'HOME': str(home), 'UV_PYTHON_DOWNLOADS': 'never', 'PIP_NO_DEPS': '1',
         'PIP_DISABLE_PIP_VERSION_CHECK': '1', 'UV_CACHE_DIR': str(tmp_path / 'uv_cache')}
  setup = lambda: subprocess.run(['/bin/bash', 'launch/worker_setup.sh', str(venv), ''], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=600)
  first = setup()
  assert first.returncode == 0, first.stdout + first.stderr
  assert 'worker_setup: python3 is 3.10.13, older than 3.11: a supported Python from uv' in first.stdout
  assert (home / '.local' / 'bin' / 'uv').exists()
  assert f'worker_setup: using {bin_dir}/python3.12 (Python 3.12.1)' in first.stdout
  assert 'worker_setup: installed in' in first.stdout and 'Python 3.12.1, albert_jax 0.1.0, jax -' in first.stdout
  where = subprocess.run([str(venv / 'bin' / 'python'), '-c', 'import importlib.util, sys; '
                          'print(sys.version_info[:2], importlib.util.find_spec("albert_jax").origin)'],
                         capture_output=True, text=True, env=env)
  assert where.stdout.split(') ')[0] == '(3, 12' and where.stdout.split(') ')[1].strip() == \
      str(ROOT / 'albert_jax' / '__init__.py')

  again = setup()
  assert again.returncode == 0 and 'worker_setup: keeping' in again.stdout and 'installing uv' not in again.stdout
  (venv / 'bin' / 'python').unlink()  # a worker whose setup was cut short
  third = setup()
  assert third.returncode == 0 and f'worker_setup: made {venv}' in third.stdout


def test_setup_dry_run_says_what_python_each_generation_gets(capsys):
  """The floor is setup.cfg's python_requires; the v2-v6e images' python3 (3.10) is below it, so the setup brings
  one; the worker runs launch/worker_setup.sh from the checkout, keeping the venv a rerun can reuse."""
  assert tpu.python_floor() == '3.11'
  for accelerator in ('v3-8', 'v4-8', 'v5litepod-8', 'v5p-8', 'v6e-8'):
    tpu.main(['setup', '--name=albert', '--zone=z', f'--accelerator={accelerator}', '--dry-run'])
    lines = capsys.readouterr().out.splitlines()
    generation = accelerators.tpu_slice(accelerator).generation
    assert lines[0] == (f'# {generation.name} workers run {generation.runtime} (Ubuntu 22.04, Python 3.10); '
                        'albert_jax needs Python >=3.11: worker_setup.sh brings one with uv')
    assert lines[3].endswith("-exec rm -rf {} + && tar xzf $HOME/albert_jax.tar.gz -C $HOME/albert_jax && bash "
                             "$HOME/albert_jax/launch/worker_setup.sh $HOME/albert_jax/.venv tpu,tf,profile'")
    assert "! -name .venv" in lines[3]


def test_tpu7x_one_host_and_multi_host_slices_and_two_slices_through_xpk_dry_run(capsys):
  """TPU7x (Ironwood): its image is Ubuntu 24.04 with Python 3.12, which the setup uses; tpu7x-8 is one VM,
  tpu7x-16 two; Cloud's docs route TPU7x through GKE, which the create line says. Several slices, which Cloud TPU's
  queued resources do not make for TPU7x, are a GKE cluster driven by XPK: one node pool per slice, the workload
  built from the committed checkout, the data axis across slices, overrides reaching the pod's shell intact."""
  for accelerator, workers in (('tpu7x-8', 1), ('tpu7x-16', 2)):
    assert dry_run('create', *COMMON, f'--accelerator={accelerator}')[-1] == (
        f'gcloud compute tpus tpu-vm create albert --zone=europe-west4-a --accelerator-type={accelerator} '
        '--version=v2-alpha-tpu7-ubuntu2404')
    tpu.main(['setup', *COMMON, f'--accelerator={accelerator}', '--dry-run'])
    out = capsys.readouterr().out
    assert out.startswith('# tpu7x workers run v2-alpha-tpu7-ubuntu2404 (Ubuntu 24.04, Python 3.12); albert_jax '
                          "needs Python >=3.11: worker_setup.sh uses the image's")
    train = dry_run('train', *COMMON, f'--accelerator={accelerator}', '--workdir=gs://b/run')
    assert len([line for line in train if '--worker=all' in line]) == 2  # stop, then start on every worker
    assert accelerators.tpu_slice(accelerator).hosts == workers

  two = [*COMMON, '--accelerator=tpu7x-16', '--num_slices=2', '--project=p']
  cluster = '--cluster=albert --zone=europe-west4-a --project=p'
  assert dry_run('create', *two, '--capacity=spot') == [
      f'xpk cluster create --tpu-type=tpu7x-16 --num-slices=2 --spot {cluster}']
  train = dry_run('train', *two, *RUN, '--', *AWKWARD)
  image = [line for line in train if line.startswith('xpk workload create')]
  assert train[train.index(image[0]) - 1] == f'xpk workload delete --workload=albert-train {cluster}'
  argv = shlex.split(image[0])
  flags = dict(a.split('=', 1) for a in argv[3:])
  assert {k: flags[k] for k in ('--workload', '--tpu-type', '--num-slices', '--base-docker-image', '--script-dir',
                                '--max-restarts')} == {
      '--workload': 'albert-train', '--tpu-type': 'tpu7x-16', '--num-slices': '2',
      '--base-docker-image': 'python:3.12', '--script-dir': '/tmp/albert_jax-albert-image', '--max-restarts': '100'}
  assert f'git -C {ROOT} archive --format=tar --output=/tmp/albert_jax-albert-image.tar HEAD' in train
  setup, run = flags['--command'].split(' && ')
  assert setup == 'bash launch/worker_setup.sh .venv tpu,tf,profile'
  assert shlex.split(run) == ['env', 'TFDS_DATA_DIR=gs://my-bucket/tfds', '.venv/bin/python', '-m',
                              'albert_jax.train', '--config=configs/xxlarge.py', '--workdir=gs://my-bucket/xxlarge',
                              '--distributed', '--config.mesh.dcn_data=2', *AWKWARD]
  assert dry_run('status', *two) == [f'xpk workload list --filter-by-job=albert-train {cluster}']
  assert dry_run('logs', *two) == [
      'gcloud container clusters get-credentials albert --region=europe-west4 --project=p',
      'kubectl logs --follow --prefix --max-log-requests=4 --selector=jobset.sigs.k8s.io/jobset-name=albert-train']
  assert dry_run('delete', *two) == [f'xpk cluster delete --force {cluster}']
  with pytest.raises(SystemExit):  # JobSet restarts the workload; there is no pod of VMs to re-create
    tpu.main(['babysit', *two, *RUN, '--dry-run'])
  assert 'JobSet restarts itself (up to --max_restarts times)' in capsys.readouterr().err


def test_several_accelerators_are_one_generation_and_never_queued():
  for bad, message in [('v4-256,v5p-128', 'distinct slices of one generation'), ('v4-64,v4-64', 'distinct'),
                       ('v4-256,v4-x', 'unknown TPU accelerator type')]:
    out = subprocess.run([sys.executable, '-m', 'launch.tpu', 'create', *COMMON, f'--accelerator={bad}'], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 2 and message in out.stderr, out.stderr
  for extra in (['--queued'], ['--num_slices=2']):
    out = subprocess.run([sys.executable, '-m', 'launch.tpu', 'babysit', *COMMON, '--accelerator=v4-256,v4-128',
                          *RUN, *extra], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and 'waits for its slice\'s capacity instead of failing' in out.stderr, out.stderr
  # A dry run creates the first: nothing refuses it.
  assert dry_run('create', *COMMON, '--accelerator=v4-256,v4-128') == [
      'gcloud compute tpus tpu-vm create albert --zone=europe-west4-a --accelerator-type=v4-256 '
      '--version=tpu-ubuntu2204-base']


def test_create_takes_the_first_slice_that_can_be_had_and_names_gcloud_s_reason_for_the_others(gcloud, monkeypatch,
                                                                                                capsys):
  calls, _ = gcloud
  monkeypatch.setenv('GCLOUD_NO_CAPACITY', 'v4-256,v4-128')
  tpu.main(['create', *COMMON, '--accelerator=v4-256,v4-128,v4-64'])
  made = [(c[3], next((a for a in c if a.startswith('--accelerator-type=')), '')) for c in calls()]
  assert made == [('create', '--accelerator-type=v4-256'), ('delete', ''), ('create', '--accelerator-type=v4-128'),
                  ('delete', ''), ('create', '--accelerator-type=v4-64')]
  out = capsys.readouterr().out
  assert ('albert: v4-256 cannot be created now (ERROR: (gcloud.compute.tpus.tpu-vm.create) There is no more capacity '
          'in the zone "europe-west4-a"; you can try') in out and 'albert: v4-128 cannot be created now' in out
  monkeypatch.setenv('GCLOUD_NO_CAPACITY', 'v4-256,v4-128,v4-64')
  with pytest.raises(SystemExit, match='albert: no slice of v4-256,v4-128,v4-64 can be created now: v4-256: ERROR'):
    tpu.main(['create', *COMMON, '--accelerator=v4-256,v4-128,v4-64'])
  quota = ("googleapiclient.errors.HttpError: <HttpError 429 returned \"Quota limit "
           "'TPUV4PodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0 in zone us-central2-b.\">")
  assert tpu.unavailable(f'Creating...\n{quota}\n') == quota
  assert tpu.unavailable('ERROR: (gcloud.compute.tpus.tpu-vm.create) PERMISSION_DENIED: caller lacks tpu.nodes.create') \
      is None


def test_babysit_starts_on_the_slice_it_can_get_and_moves_up_after_prefer_after(gcloud, monkeypatch, capsys):
  """v4-256 has no capacity at first: the run starts on v4-128. Once v4-256 can be had and --prefer_after has
  passed, babysit stops the running training with a checkpoint (a graceful stop: SIGTERM first), deletes the
  v4-128 and creates the v4-256, one line each; then the run finishes there."""
  calls, _ = gcloud
  monkeypatch.setenv('GCLOUD_NO_CAPACITY', 'v4-256')
  monkeypatch.setenv('GCLOUD_EXIT_CODE', '-')  # every worker's training runs
  monkeypatch.setenv('GCLOUD_WORKERS', '32')
  (gcloud[1].parent / 'states').write_text('MISSING')
  polls = []

  def poll(seconds):  # babysit's sleep between polls: what changes in the world meanwhile
    polls.append(seconds)
    if len(polls) == 1:
      monkeypatch.delenv('GCLOUD_NO_CAPACITY')  # v4-256 can be had again
    elif any('--accelerator-type=v4-256' in c for c in calls()[-12:]):
      monkeypatch.setenv('GCLOUD_EXIT_CODE', '0')  # moved: training finishes there

  monkeypatch.setattr(tpu.time, 'sleep', poll)
  with pytest.raises(SystemExit) as ended:
    tpu.main(['babysit', *COMMON, '--accelerator=v4-256,v4-128', *RUN, '--poll_seconds=5', '--prefer_after=0'])
  assert ended.value.code == 0
  out = capsys.readouterr().out
  assert ('albert: created on v4-128 (16 hosts): v4-256: ERROR: (gcloud.compute.tpus.tpu-vm.create) There is no more '
          'capacity in the zone "europe-west4-a"') in out
  assert re.search(r'albert: \d+ s on v4-128 \(--prefer_after 0\): stopping training with a checkpoint to try v4-256 '
                   r'first', out), out
  assert 'albert: moved from v4-128 to v4-256 (32 hosts): v4-256 tried first after 0 s; resuming from' in out, out
  assert 'training finished (exit code 0); 0 restart(s)' in out
  made = calls()
  up = max(i for i, c in enumerate(made) if '--accelerator-type=v4-256' in c)  # the create that succeeded
  assert made[up - 1][3] == 'delete' and made[up - 2][3] == 'ssh'  # the v4-128 deleted once training stopped ...
  assert made[up - 2][-1].startswith('--command=pkill -f "[a]lbert_jax.train"; for i in $(seq 90)')  # SIGTERM first
