"""Downstream tasks, one module per family: glue (and the classification they share with builtin), race, squad
(with squad_eval, the official scorers), builtin (the task made from the built-in corpus); heads holds the models.

A task is what `finetune.py` needs from one, written down in `Task` below: a new task implements it and is named
in `finetune.TASKS`; nothing else in the fine-tuning loop changes."""
from typing import Any, Optional, Protocol

from albert_jax.errors import ConfigError


class DataError(ConfigError):
  """A dataset file or example that cannot be used; the message names it and the fix."""


class Task(Protocol):
  """What finetune.py asks of a task, in the order it asks (`Task(config)` builds one from the fine-tuning config).

  name: the config's task.name. metric: the dev metric that picks the best checkpoint (e.g. 'eval_accuracy'),
  with `scale` what makes it 0-1 for reports (100 for SQuAD's percentages, else 1).
  """
  name: str
  metric: str
  scale: float

  def splits(self) -> dict:
    """{split: (examples, leaderboard file name or None)}: 'train', 'dev' (and 'dev_<name>' for further dev sets,
    scored as eval_<name>_*), and test splits whose predictions are written but not scored."""

  def features(self, examples: list, tokenizer, split: str) -> dict:
    """Arrays with one row per model input (an example, or a window of one), including 'weights' (1 for real
    rows); every split's are made before training starts, so bad data stops the run early."""

  @property
  def head(self) -> dict:
    """The model's head as heads.make_model builds it and an exported checkpoint records it ({'architecture':
    an HF class name, ...})."""

  def dummy_inputs(self) -> dict:
    """Keyword inputs of the model's shape for initialising its parameters."""

  def normalizers(self, batch) -> dict:
    """What the loss divides its sum by, for a whole batch (its microbatches share it): step.normalizers."""

  def loss(self, model, params, batch, rng, deterministic: bool, norms: Optional[dict] = None) -> tuple:
    """(mean loss, sums for the logged metrics), the mean over `norms` or this batch's own."""

  def predict(self, model, params, batch) -> dict:
    """The model's outputs for a batch of features, the arrays `score` and `prediction_files` read."""

  def score(self, outputs: dict, examples: list, features: dict, split: str, prefix: str = 'eval_') -> dict:
    """The task's official metrics on a dev split ({prefix + name: value, prefix + name + '_count': n})."""

  def prediction_files(self, outputs: dict, examples: list, split: str, leaderboard_file: Any) -> dict:
    """{file name: text} written under the run's predictions/ (the leaderboard's format for test splits)."""
