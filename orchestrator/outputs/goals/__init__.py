"""What a job certifies, as its outputs present it: one registered object per goal, asked for its parts.

A certificate (:class:`~..selection_schema.Certificate`) states one goal: candidates certified R <= alpha
(:mod:`.risk`), the same as a recovery against a reference model (:mod:`.recovery`) or against a baseline on the
same items (:mod:`.regression`), a pairwise ranking
(:mod:`.ranking`), either on stacked tasks (:mod:`.stacked`) or gated per candidate (:mod:`.gate`), or a multi-task
job (:mod:`.all_tasks`). :func:`goal_of` finds the goal once (:mod:`.registry`); the terminal
(``certsel/terminal.py``), the report, the certificate and MLflow ask it for each part and know no goal themselves.
No heavy imports: ``certsel show`` starts fast.
"""

from . import all_tasks, gate, ranking, recovery, regression, risk, stacked  # noqa: F401  (each registers its goals)
from .all_tasks import MultiTaskGoal
from .base import CSV_FIELDS, FAILED, Ask, Column, Field, Goal, Section, Shown, candidate_records, nominal_words
from .registry import GOALS, choose, goal_for, goal_for_config, goal_of, register, unregister

__all__ = ["CSV_FIELDS", "FAILED", "GOALS", "Ask", "Column", "Field", "Goal", "MultiTaskGoal", "Section", "Shown",
           "candidate_records", "choose", "goal_for", "goal_for_config", "goal_of", "nominal_words", "register",
           "unregister"]
