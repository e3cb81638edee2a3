"""Downstream tasks, one module per family: glue (and the classification they share with builtin), race, squad
(with squad_eval, the official scorers), builtin (the task made from the built-in corpus); heads holds the models."""
from albert_jax.errors import ConfigError


class DataError(ConfigError):
  """A dataset file or example that cannot be used; the message names it and the fix."""
