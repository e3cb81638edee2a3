#!/usr/bin/env bash
# Sets up one TPU VM worker, from the checkout `python -m launch.tpu setup` unpacked there:
#
#   bash launch/worker_setup.sh VENV [EXTRAS]      # EXTRAS: pip extras, default tpu,tf
#
# It makes VENV a virtual environment on a Python the project supports (setup.cfg's python_requires, the one place
# the floor is stated) and installs the project into it. The images of TPU v2 to v6e are Ubuntu 22.04, whose python3
# is 3.10: there it uses uv (from PyPI) to find a newer Python already on the worker, or else to install CPython
# BROUGHT (uv's standalone builds). TPU7x's image (Ubuntu 24.04) has 3.12 and needs none of this. Safe to rerun on a
# half-set-up worker: each step looks first at what is there (a venv on a supported Python is kept, uv installed
# once, pip install -e is idempotent). Ends by printing what it installed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:?usage: bash launch/worker_setup.sh VENV [EXTRAS]}
extras=${2-tpu,tf}
BROUGHT=3.12
floor=$(sed -n 's/^python_requires *= *>= *\([0-9][0-9.]*\) *$/\1/p' "$repo/setup.cfg")
[[ -n "$floor" ]] || { echo "worker_setup: no 'python_requires = >=X.Y' in $repo/setup.cfg" >&2; exit 2; }

say() { echo "worker_setup: $*"; }
supported() {  # the interpreter $1 runs and is at least the floor
  "$1" -c "import sys; sys.exit(sys.version_info[:2] < tuple(map(int, '$floor'.split('.'))))" 2>/dev/null
}
version() { "$1" -c 'import sys; print(".".join(map(str, sys.version_info[:3])))'; }
uv_binary() {  # uv, installed for this user from PyPI the first time it is needed
  local uv
  uv=$(command -v uv || echo "$HOME/.local/bin/uv")
  if [[ ! -x "$uv" ]]; then
    say "installing uv for this user (pip install --user uv)" >&2
    # Ubuntu 24.04's pip refuses --user installs into its system Python (PEP 668) unless told this is intended;
    # an image without pip gets uv's own installer.
    python3 -m pip install --quiet --user uv >&2 || \
      python3 -m pip install --quiet --user --break-system-packages uv >&2 || \
      { command -v curl >/dev/null && curl -LsSf https://astral.sh/uv/install.sh | sh >&2; }
  fi
  echo "$uv"
}

if [[ -x "$venv/bin/python" ]] && supported "$venv/bin/python"; then
  say "keeping $venv (Python $(version "$venv/bin/python"))"
else
  rm -rf "$venv"  # none, broken, or on an older Python: made anew
  python=$(command -v python3 || true)
  if [[ -n "$python" ]] && supported "$python"; then
    say "python3 is $(version "$python") (>= $floor): using it"
  else
    say "python3 is $([[ -n "$python" ]] && version "$python" || echo missing), older than $floor: a supported \
Python from uv"
    uv=$(uv_binary)
    python=$("$uv" python find ">=$floor" 2>/dev/null || true)
    if [[ -z "$python" ]]; then
      say "none on this worker: installing CPython $BROUGHT with uv"
      "$uv" python install "$BROUGHT"
      python=$("$uv" python find "$BROUGHT")
    fi
    say "using $python (Python $(version "$python"))"
  fi
  # python -m venv needs Ubuntu's pythonX.Y-venv package, which an image may lack; uv makes one without it.
  if ! "$python" -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    "$(uv_binary)" venv --quiet --seed --python "$python" "$venv"
  fi
  say "made $venv"
fi

"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -e "$repo${extras:+[$extras]}"
say "installed in $venv: $("$venv/bin/python" -c '
import importlib.metadata as m, sys
def version(name):
  try:
    return m.version(name)
  except m.PackageNotFoundError:
    return "-"
names = ("albert_jax", "jax", "jaxlib", "libtpu", "flax", "optax", "orbax-checkpoint")
print(f"Python {sys.version.split()[0]},", ", ".join(f"{n} {version(n)}" for n in names))')"
