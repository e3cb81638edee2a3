"""libtpu's environment on a machine without a TPU, set when albert_jax is imported, before JAX starts a backend.

The `tpu` extra installs libtpu, which the fit check (aot.py) compiles with on any machine. When JAX loads it, it
looks for the TPU VM's metadata (the accelerator type, the host bounds, the other workers' hostnames), finds none
on a laptop, a CPU VM or a GPU machine, and prints half a dozen lines of errors that read as a broken install.
Where the machine has no TPU chip, we give libtpu the answer it was looking for (one host of its own), and it is
quiet; it still fails to start a TPU backend (there is none) and JAX falls back as before, and compile-only TPU
topologies compile exactly as without it (the same programs and memory, tested). On a TPU VM nothing is touched,
so its real errors still show.
"""
import functools
import importlib.util
import os


@functools.cache  # the import's libtpu check and the CLIs' allocator check ask it once between them
def jax_hardware_probe():
  """JAX's own tests for TPU chips on the PCI bus and GPU device files (jax/_src/hardware_utils.py), or None where
  that file is unavailable. The file (standard library only) is loaded by itself: importing the jax package for it
  would cost every albert_jax import a second and more, the launch scripts' included, which use no JAX."""
  jax_spec = importlib.util.find_spec('jax')  # finds the package without importing it
  if jax_spec is None or not jax_spec.submodule_search_locations:
    return None
  file = os.path.join(jax_spec.submodule_search_locations[0], '_src', 'hardware_utils.py')
  try:
    spec = importlib.util.spec_from_file_location('albert_jax._jax_hardware_utils', file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
  except Exception:  # a best-effort probe (the file moved or changed in a newer JAX)
    return None


def tpu_chips() -> int:
  """TPU chips on this machine's PCI bus, by JAX's own test; -1 (unknown) where that test is unavailable."""
  try:
    return jax_hardware_probe().num_available_tpu_chips_and_device_id()[0]
  except Exception:  # no probe, or it changed: unknown, so libtpu is left alone
    return -1


def quiet_libtpu_without_tpu(chips: int) -> dict:
  """The libtpu variables set (and not already set by the user) for a machine with `chips` TPU chips."""
  if chips != 0:
    return {}
  defaults = {'TPU_HOST_BOUNDS': '1,1,1', 'TPU_WORKER_HOSTNAMES': 'localhost'}
  added = {k: v for k, v in defaults.items() if k not in os.environ}
  os.environ.update(added)
  return added
