"""certsel inside inspect-ai: certified early stopping of a task (:class:`CertifiedStopping`), certified selection
across the tasks of several models or prompts (:class:`CertifiedSelection`), certified pairwise ranking of several
models (:class:`CertifiedRanking`) and inspect logs as certsel tables (``certsel inspect-table``). See docs/inspect.md.

inspect-ai is an optional dependency (``pip install certsel[inspect]``); it is imported only when a manager meets a
task.
"""

from .record import SampleCounts, TaskRecord
from .ranking import CertifiedRanking, RankingResult
from .scores import ScoreError
from .selection import CandidateResult, CertifiedSelection, SelectionResult
from .stopping import CertifiedStopping
from .setup import SetupError
from .task import StopReason, TaskTest

__all__ = ["CandidateResult", "CertifiedRanking", "CertifiedSelection", "RankingResult", "CertifiedStopping", "SelectionResult", "TaskRecord", "TaskTest", "SampleCounts", "ScoreError", "SetupError", "StopReason"]
