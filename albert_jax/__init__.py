"""ALBERT pretraining in JAX/Flax. The public entry point for trained models is `from_pretrained`."""
from albert_jax.interop import from_pretrained

__all__ = ["from_pretrained"]
