"""Every accelerator albert_jax knows, in one table: each Cloud TPU generation (its JAX device kinds, memory, peak,
hosts, how Cloud TPU names its slices and which TPU VM software runs JAX on it) and the GPUs' bf16 peaks. The fit
check (aot.py), MFU (metrics.py) and the launch scripts (launch/tpu.py) read it; nothing else holds these figures.
"""
import dataclasses
import re
from typing import Optional

from albert_jax.errors import ConfigError

GIB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class TpuGeneration:
  name: str  # as the fit check and this table call it: v5e
  cloud_prefix: str  # as Cloud TPU accelerator types begin: v5litepod-256
  device_kinds: tuple  # jax.devices()[0].device_kind on it
  bf16_peak: float  # dense bf16 FLOP/s per JAX device
  hbm_bytes: int  # per JAX device
  devices_per_chip: int  # 2 on v2/v3 (each core is a device); megacore chips (v4, v5p) and 1-core chips: 1
  name_counts_cores: bool  # v3-64 and v5p-128 count TensorCores (2 per chip); v5litepod-256 and v6e-256 chips
  grid_dims: int  # the chip grid libtpu takes: 2-D (v3:16x16) or 3-D (v4:4x4x4)
  chip_config: Optional[str]  # libtpu's compile-only chip config ('megacore': one device per 2-core chip)
  runtime: str  # TPU VM software version for JAX
  multislice: bool  # slices can be joined over the data-center network
  smallest: int  # the smallest slice Cloud TPU sells, as its name counts (v4-8: 4 chips; v5litepod-1: 1 chip)
  chips_per_host: int = 4  # TPU VM hosts of a multi-host slice
  image_ubuntu: str = '22.04'  # the runtime image's OS, and its python3 (launch/worker_setup.sh brings a newer
  image_python: str = '3.10'  # one where it is older than setup.cfg's python_requires)
  # Cloud's docs support creating it through the Cloud TPU API (tpu-vm create, queued resources). TPU7x: "The Cloud
  # TPU API is not supported on TPU7x and later TPU versions" (cloud.google.com/tpu/docs/runtimes): GKE or Compute
  # Engine instead, though Google's own accelerator-microbenchmarks README creates a tpu7x-8 with tpu-vm create.
  cloud_tpu_api: bool = True
  # The oldest libtpu seen compiling this generation's steps here; None: any. TPU7x: 0.0.42.1 (jax 0.10.2's)
  # segfaults compiling xxlarge's step in 16 microbatches for tpu7x-8, 0.0.50.1 (jax 0.12's) compiles it.
  min_libtpu: Optional[str] = None


# Sources (checked 2026-11): Cloud TPU system architecture pages cloud.google.com/tpu/docs/{v2,v3,v4,v5e,v5p,v6e}
# for peak, HBM and cores per chip; cloud.google.com/tpu/docs/runtimes for the software versions; device kinds as
# JAX reports them (jax/_src/mesh_utils.py, tpu_info.py; v5p says 'TPU v5' on a TPU VM, 'TPU v5p' on Pathways);
# 4 chips per TPU VM host in multi-host slices (libtpu's topologies, MaxText's accelerator_to_spec_map.py; a v5e
# or v6e slice of 8 chips or fewer is one VM); multislice from v4 on (cloud.google.com/tpu/docs/multislice-
# introduction); slice shapes sold (cloud.google.com/tpu/docs/supported-tpu-configurations): from 2x2x1 chips
# (-8) on v4 and v5p, from one chip on v5e and v6e, then 2x2 and 2x4 (no 2-chip slice). The images' OS: Cloud's
# runtimes page gives none; tpu-ubuntu2204-base names Ubuntu 22.04, and the v2-alpha-tpuv5/-tpuv5-lite/-tpuv6e
# images are 22.04 too (python3 3.10: packages.ubuntu.com/jammy/python3), which pytorch/xla#5294 and v6e setups
# seen in public repositories bear out.
TPU_GENERATIONS = (
    # v2: 46 TFLOP/s and 16 GiB per chip (jax tpu_info.py: the docs give no figures); 2 cores per chip.
    TpuGeneration('v2', 'v2', ('TPU v2',), 23e12, 8 * GIB, 2, True, 2, None, 'tpu-ubuntu2204-base', False, 8),
    # v3: 123 TFLOP/s and 32 GiB per chip (docs), 2 cores per chip.
    TpuGeneration('v3', 'v3', ('TPU v3',), 61.5e12, 16 * GIB, 2, True, 2, None, 'tpu-ubuntu2204-base', False, 8),
    # v4: 275 TFLOP/s and 32 GiB per chip (docs), megacore.
    TpuGeneration('v4', 'v4', ('TPU v4',), 275e12, 32 * GIB, 1, True, 3, 'megacore', 'tpu-ubuntu2204-base', True, 8),
    # v5e: 197 TFLOP/s and 16 GiB per chip (docs), 1 core.
    TpuGeneration('v5e', 'v5litepod', ('TPU v5 lite', 'TPU v5e'), 197e12, 16 * GIB, 1, False, 2, None,
                  'v2-alpha-tpuv5-lite', True, 1),
    # v5p: 459 TFLOP/s and 95 GiB per chip (docs; tpu_info says 96), megacore.
    TpuGeneration('v5p', 'v5p', ('TPU v5', 'TPU v5p'), 459e12, 95 * GIB, 1, True, 3, 'megacore', 'v2-alpha-tpuv5',
                  True, 8),
    # v6e (Trillium): 918 TFLOP/s and 32 GiB per chip (docs), 1 core.
    TpuGeneration('v6e', 'v6e', ('TPU v6 lite', 'TPU v6e'), 918e12, 32 * GIB, 1, False, 2, None, 'v2-alpha-tpuv6e',
                  True, 1),
    # TPU7x (Ironwood): 2,307 TFLOP/s bf16 and 192 GiB HBM per chip, 2 TensorCores that JAX sees as 2 devices
    # (dual chiplet), 4 chips per VM (cloud.google.com/tpu/docs/tpu7x; libtpu's 'tpu7x:2x2x1' gives 8 devices of
    # kind 'TPU7x' on one host, 94.75 GiB usable each). tpu7x-N counts TensorCores: tpu7x-8 is 2x2x1 chips (Google's
    # XPK, system_characteristics.py). Software v2-alpha-tpu7-ubuntu2404 (not on Cloud's runtimes page; Google's
    # accelerator-microbenchmarks README): Ubuntu 24.04, python3 3.12 (packages.ubuntu.com/noble/python3).
    TpuGeneration('tpu7x', 'tpu7x', ('TPU7x',), 2307e12 / 2, 96 * GIB, 2, True, 3, None, 'v2-alpha-tpu7-ubuntu2404',
                  True, 8, image_ubuntu='24.04', image_python='3.12', cloud_tpu_api=False, min_libtpu='0.0.50'),
)

# GPUs report their CUDA name ('NVIDIA H200', 'NVIDIA H100 80GB HBM3'); the first matching prefix counts, so the
# PCIe and NVL H100s, with lower clocks, come before the SXM figure. Dense bf16, NVIDIA's data sheets.
GPU_BF16_PEAK = {'NVIDIA H100 PCIe': 756e12, 'NVIDIA H100 NVL': 835e12, 'NVIDIA H100': 989e12,
                 'NVIDIA H200': 989e12, 'NVIDIA A100': 312e12}


def bf16_peak(device_kind: str) -> Optional[float]:
  """The dense bf16 peak of one JAX device of this kind, if it is an accelerator we know."""
  tpu = next((g for g in TPU_GENERATIONS if device_kind in g.device_kinds), None)
  if tpu:
    return tpu.bf16_peak
  return next((flops for name, flops in GPU_BF16_PEAK.items() if device_kind.startswith(name)), None)


def slice_words(device_kind: str, devices: int, hosts: int) -> str:
  """What a run is on, in words: the Cloud TPU slice its devices make (v3-16, 2 hosts), or its devices and hosts."""
  generation = next((g for g in TPU_GENERATIONS if device_kind in g.device_kinds), None)
  on = f'{hosts} host{"s" * (hosts > 1)}'
  if generation is None:
    return f'{devices} {device_kind} device{"s" * (devices > 1)}, {on}'
  chips = devices // generation.devices_per_chip
  return f'{generation.cloud_prefix}-{chips * 2 if generation.name_counts_cores else chips}, {on}'


@dataclasses.dataclass(frozen=True)
class Slice:
  """One Cloud TPU slice: v5litepod-256 is 256 v5e chips on 64 hosts."""
  generation: TpuGeneration
  size: int  # the number in the name
  chips: int

  @property
  def cloud_name(self) -> str:  # what gcloud takes as --accelerator-type
    return f'{self.generation.cloud_prefix}-{self.size}'

  @property
  def devices(self) -> int:
    return self.chips * self.generation.devices_per_chip

  @property
  def hosts(self) -> int:
    """TPU VM workers: one up to 8 chips of a 1-core-chip generation (Cloud TPU's v5litepod-8 and v6e-8 are one
    8-chip VM), else 4 chips per host."""
    if not self.generation.name_counts_cores and self.chips <= 8:
      return 1
    return max(self.chips // self.generation.chips_per_host, 1)

  def smaller(self) -> Optional['Slice']:
    """The next smaller slice of this generation that Cloud TPU sells, if any."""
    size = self.size // 2
    if size == 2 and self.generation.smallest == 1:  # v5e and v6e: 1, 4, 8, ... chips
      size = 1
    return tpu_slice(f'{self.generation.name}-{size}') if size >= self.generation.smallest else None


def tpu_slice(name: str) -> Slice:
  """'v5p-128', 'v5litepod-256' or 'v5e-256' -> its generation and size; a one-line error for anything else."""
  match = re.fullmatch(r'(v\d+[a-z]*|tpu\d+[a-z]*)-(\d+)', name.strip().lower())
  prefix = match.group(1) if match else None
  generation = next((g for g in TPU_GENERATIONS if prefix in (g.name, g.cloud_prefix)), None)
  if generation is None:
    raise ConfigError(f'unknown TPU accelerator type {name!r}: expected GENERATION-SIZE with GENERATION one of '
                      f'{", ".join(sorted({p for g in TPU_GENERATIONS for p in (g.name, g.cloud_prefix)}))}, as '
                      f'Cloud TPU names them (v3-1024, v4-128, v5litepod-256, v5p-128, v6e-256, tpu7x-8).')
  size = int(match.group(2))
  chips = size // 2 if generation.name_counts_cores else size
  if chips < 1 or chips & (chips - 1) or (generation.name_counts_cores and size % 2):
    raise ConfigError(f'{name}: the size must be a power of two ({generation.cloud_prefix}-8, '
                      f'{generation.cloud_prefix}-32, ...).')
  return Slice(generation, size, chips)
