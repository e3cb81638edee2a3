"""The errors for input a user can fix. Their own module, free of JAX, so that what only checks names (the launch
scripts, the accelerator table) starts without importing JAX, and any room can raise them without importing
another's."""


class ConfigError(ValueError):
  """Input a user can fix (a config; and, through the subclasses, a corpus, a vocabulary, a checkpoint): the
  message names the problem and the fix. The command-line tools print it alone and exit with status 2."""


class CheckpointError(ConfigError):
  """A checkpoint that cannot be read or does not fit the model; the message names the file and the fix."""


class RunError(RuntimeError):
  """A run that cannot go on for a reason that is not the user's input, told in one line (what happened, what was
  kept, what to do): the command-line tools print it alone and exit with status 1."""
