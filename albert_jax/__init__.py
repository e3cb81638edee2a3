from albert_jax.interop import from_pretrained
