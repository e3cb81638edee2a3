"""The error for input a user can fix. Its own module, free of JAX, so that what only checks names (the launch
scripts, the accelerator table) starts without importing JAX."""


class ConfigError(ValueError):
  """Input a user can fix (a config; and, through the subclasses, a corpus, a vocabulary, a checkpoint): the
  message names the problem and the fix. The command-line tools print it alone and exit with status 2."""
