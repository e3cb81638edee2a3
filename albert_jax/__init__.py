"""ALBERT pretraining in JAX/Flax. The public entry point for trained models is `from_pretrained`."""
from albert_jax import tpu_environment

tpu_environment.quiet_libtpu_without_tpu(tpu_environment.tpu_chips())  # before any JAX backend starts

from albert_jax.interop import from_pretrained  # noqa: E402

__all__ = ["from_pretrained"]
