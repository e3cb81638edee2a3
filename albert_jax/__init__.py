"""ALBERT pretraining in JAX/Flax. The public entry point for trained models is `from_pretrained`."""
from albert_jax import tpu_environment

tpu_environment.quiet_libtpu_without_tpu(tpu_environment.tpu_chips())  # before any JAX backend starts

__all__ = ["from_pretrained"]


def __getattr__(name):
  # Imported on first use: `import albert_jax` alone (what the launch scripts' imports amount to) loads no JAX.
  if name == 'from_pretrained':
    from albert_jax.interop import from_pretrained
    return from_pretrained
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
