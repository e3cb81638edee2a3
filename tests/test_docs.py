"""README.md, launch/README.md and docs/ cannot rot silently: every relative link, image and anchor resolves, every
config file named exists, and every command shown parses: its module's or script's --help exits 0, each flag it
passes is one that --help lists, and each --config.x.y override names a field of the config it names. The README
stays a router: short, two quickstart commands, no line wider than a screen; no page over 20 kB."""
import concurrent.futures
import importlib.util
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT, load_config

DOCS = [ROOT / 'README.md', ROOT / 'launch' / 'README.md', *sorted((ROOT / 'docs').glob('**/*.md'))]
SHELL_OPERATORS = {'|', '||', '&', '&&', ';', '>', '>>', '<', '2>', '2>&1'}


def code(text: str) -> list:
  """The text of every fenced block and inline code span, a backslash-continued line joined into one."""
  fenced = re.findall(r'```[^\n]*\n(.*?)```', text, re.S)
  inline = re.findall(r'`([^`\n]+)`', re.sub(r'```.*?```', '', text, flags=re.S))
  return [re.sub(r'\\\n\s*', ' ', span) for span in fenced + inline]


def commands(text: str) -> list:
  """(what runs: 'albert_jax.train' or 'bench/x.py', its arguments) for each python command shown, up to the
  first shell operator; lines starting with # (comments, recorded remote shells) are not commands."""
  found = []
  for span in code(text):
    for line in span.splitlines():
      if line.strip().startswith('#'):
        continue
      for match in re.finditer(r'\bpython3? (?:-m ([\w.]+)|((?:bench|launch)/\w+\.py))', line):
        lexer = shlex.shlex(line[match.end():], posix=True, punctuation_chars='|&;<>')
        lexer.whitespace_split = True
        args = []
        for token in lexer:
          if token in SHELL_OPERATORS or token.startswith('python'):
            break
          args.append(token.strip('[]'))
        found.append((match.group(1) or match.group(2), args))
  return found


def shown() -> list:
  return [(doc.relative_to(ROOT), what, args) for doc in DOCS for what, args in commands(doc.read_text())]


def anchors(doc) -> set:
  """The anchors GitHub gives a page's headings: lowercased, punctuation but - and _ dropped, spaces to -, a
  repeated one suffixed -1, -2, ... (headings inside fenced code are not headings)."""
  seen, found = {}, set()
  for heading in re.findall(r'^#{1,6} (.+)$', re.sub(r'```.*?```', '', doc.read_text(), flags=re.S), re.M):
    slug = re.sub(r'[^\w\- ]', '', heading.strip().lower().replace('`', '')).replace(' ', '-')
    found.add(slug if slug not in seen else f'{slug}-{seen[slug]}')
    seen[slug] = seen.get(slug, 0) + 1
  return found


def test_every_relative_link_image_and_anchor_resolves():
  broken = []
  for doc in DOCS:
    for target in re.findall(r'\]\(([^)\s]+)\)', doc.read_text()):
      if re.match(r'[a-z]+:', target):
        continue  # a web address
      page, _, anchor = target.partition('#')
      linked = doc.parent / page if page else doc
      if not linked.exists() or (anchor and linked.suffix == '.md' and anchor not in anchors(linked)):
        broken.append(f'{doc.relative_to(ROOT)}: {target}')
  assert not broken


def test_the_readme_is_a_router_and_pages_stay_readable():
  readme = (ROOT / 'README.md').read_text()
  assert len(readme.split()) <= 800  # a status line, the quickstart, a route per journey, the headline results
  prose = re.sub(r'```.*?```', '', readme, flags=re.S)
  assert [line for line in prose.splitlines() if len(line) > 160 and not line.startswith('|')] == []
  assert [f'{d.relative_to(ROOT)}: {d.stat().st_size}' for d in DOCS if d.stat().st_size > 20_000] == []
  # Two commands: the main job and the tests.
  quickstart = re.search(r'## Quickstart\n.*?```bash\n(.*?)```', readme, re.S).group(1)
  assert [line.split('&& ')[-1].split()[2] for line in quickstart.strip().splitlines()] == ['albert_jax.train',
                                                                                          'pytest']


def test_every_config_file_named_exists():
  named = {(doc.relative_to(ROOT), path) for doc in DOCS for path in re.findall(r'configs/[\w/]+\.py', doc.read_text())}
  assert named and not [f'{doc}: {path}' for doc, path in named if not (ROOT / path).is_file()]


def help_text(what: str) -> tuple:
  argv = [sys.executable, *(['-m', what] if not what.endswith('.py') else [what]), '--help']
  out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
  return out.returncode, out.stdout + out.stderr


@pytest.fixture(scope='module')
def helps():
  programs = sorted({what for _, what, _ in shown() if what != 'pytest'})
  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    return dict(zip(programs, pool.map(help_text, programs)))


def test_every_command_shown_runs_its_help_and_passes_only_flags_it_lists(helps):
  assert len(helps) >= 10  # the modules, launch scripts and benches the docs show
  problems = [f'{what} --help exited {rc}: {text[-300:]}' for what, (rc, text) in helps.items() if rc]
  for doc, what, args in shown():
    if what == 'pytest':
      continue
    listed = set(re.findall(r'--(?:\[no\])?([\w-]+)', helps[what][1]))
    for arg in args:
      name = arg[2:].split('=')[0] if arg.startswith('--') else None
      if name and not name.startswith('config.') and name not in listed and name.removeprefix('no') not in listed:
        problems.append(f'{doc}: {what} has no flag --{name}')
  assert not problems


def config_of(args: list):
  """The config a command's --config.x.y overrides apply to: its --config file (with its :argument), or its
  sweep file's CONFIG; None where the command names it by a placeholder."""
  values = dict(arg[2:].split('=', 1) for arg in args if arg.startswith('--') and '=' in arg)
  if 'sweep' in values and (ROOT / values['sweep']).is_file():
    spec = importlib.util.spec_from_file_location('sweep', ROOT / values['sweep'])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return load_config(module.CONFIG)
  path, _, arg = values.get('config', '').partition(':')
  return load_config(path, *([arg] if arg else [])) if path.endswith('.py') else None


def test_every_config_override_shown_names_a_field():
  checked, problems = 0, []
  for doc, what, args in shown():
    overrides = [arg[2:].split('=')[0].split('.')[1:] for arg in args if arg.startswith('--config.')]
    config = config_of(args) if overrides else None
    for keys in overrides if config is not None else []:
      node = config
      for key in keys:
        if key not in node:
          problems.append(f'{doc}: {what} --config.{".".join(keys)}: no such field')
          break
        node = node[key]
      checked += 1
  assert checked >= 10 and not problems
