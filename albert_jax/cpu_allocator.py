"""glibc's malloc set for XLA:CPU before JAX starts its backend, so that each step reuses the memory the last one
freed instead of asking the kernel for fresh pages.

XLA:CPU allocates an execution's temporaries with malloc and frees them when it returns. glibc serves a block over
32 MB with mmap and unmaps it on free, and deletes a thread's arena heap once it is empty, so a step whose
temporaries outgrow that (the recipe's model fine-tuning on SST-2's batch from two layers up) writes every step
into pages the kernel must map and zero again: 13,800 minor page faults a step at two layers and 26,100 at four,
against none at one layer: most of the fine-tuning step's excess over torch's (docs/training.md). One arena,
no mmap and no trimming keep freed memory in the process for the next step. What it costs: memory a process frees
is not given back to the system until it ends, so its peak stays resident, which a training run reaches every
step anyway.

Set only where it helps: on Linux with glibc, on a machine with no TPU or GPU (there XLA's
temporaries live in device memory), before JAX's CPU threads first allocate (threads keep the arena they started
with), and not where the user chose malloc's settings (any MALLOC_* variable, glibc.malloc tunables, or a
preloaded allocator such as tcmalloc): that is also how to opt out.
"""
import ctypes
import os
import platform
import sys

from albert_jax import tpu_environment

# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
NEVER_TRIM = 2**31 - 1  # mallopt takes an int: 2 GB of free memory at the heap's top before any is returned


def user_chose_malloc(environ=os.environ) -> bool:
  """Whether the environment already sets glibc's malloc (or replaces it): then it is the user's to set."""
  return (any(name.startswith('MALLOC_') for name in environ) or 'glibc.malloc' in environ.get('GLIBC_TUNABLES', '')
          or 'malloc' in environ.get('LD_PRELOAD', ''))


def cpu_only(jax_platforms) -> bool:
  """Whether JAX will run on the CPU: as `jax_platforms` (JAX's setting, e.g. 'cpu' or 'tpu,cpu') says where
  set, else where JAX's own probe finds no TPU chip and no NVIDIA or AMD GPU (unknown: False)."""
  if jax_platforms:
    return jax_platforms.split(',')[0] == 'cpu'
  probe = tpu_environment.jax_hardware_probe()
  try:
    return (probe.num_available_tpu_chips_and_device_id()[0] == 0 and not probe.has_visible_nvidia_gpu()
            and probe.num_available_amd_gpus(stop_at=1) == 0)
  except Exception:  # no probe, or it changed: leave malloc alone
    return False


def reuse_freed_memory() -> bool:
  """Sets malloc to keep freed memory for reuse (module docstring) where that applies; True where it was set.
  Call before JAX runs anything, imported or not: the command-line tools that run JAX do, first thing
  (config.run_cli)."""
  if not sys.platform.startswith('linux') or platform.libc_ver()[0] != 'glibc' or user_chose_malloc():
    return False
  jax = sys.modules.get('jax')  # JAX's setting where it is imported (reading it starts no backend), else the
  platforms = (getattr(jax.config, 'jax_platforms', None) if jax else None) or os.environ.get('JAX_PLATFORMS')  # variable
  if not cpu_only(platforms):
    return False
  mallopt = ctypes.CDLL('libc.so.6').mallopt
  return all(mallopt(option, value) == 1
             for option, value in ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, NEVER_TRIM)))
