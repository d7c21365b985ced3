"""What ``CertifiedStopping.complete_task`` returns and inspect saves as ``results.early_stopping.metadata``: one
task's record, as plain JSON values.

The certificate is the job's (``certsel show JOB_ID``, ``job_id``); the record is the task's part of it (decision,
level, e-value, bound) with the samples counted as inspect ran them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class SampleCounts:
    """Where the task's samples went."""

    total: int  # the task's samples (N)
    scheduled: int  # samples inspect started
    scored: int  # samples whose every epoch was scored and given to the test, in schedule order
    at_decision: int  # samples the test had seen when the stop was decided
    in_flight_at_stop: int  # started before the stop, not yet seen by the test then (their cost is counted)
    skipped: int  # samples never started (their early stops are in the log's summary)
    skipped_runs: int  # sample-epochs stopped early (what inspect lists in early_stops)
    unfinished: int  # started but not given to the test (an epoch stopped, an error, an earlier one missing)
    earlier: int = 0  # of ``scored``, those earlier runs of its claim gave the test (skipped by this eval)


@dataclass(frozen=True)
class TaskRecord:
    """One task's part of the certificate: "the mean score is at least T", with probability >= 1 - delta."""

    task: str
    model: str
    candidate: str | None
    scorer: str
    at_least: float
    delta: float
    certified: bool
    status: str  # certified, futile, budget, not needed, refused, not certified
    reason: str
    log_e_value: float  # log of the running maximum of the e-process
    threshold: float  # the e-value that certifies (1/delta, or the procedure's)
    # one-sided lower bound on the mean score at 1 - delta (>= T exactly when certified); in a selection the joint
    # bound, None where the procedure states none
    lower_bound: float | None
    estimate: float  # the mean score of the samples scored
    futility_log_e_value: float | None
    futility: float | None
    samples: SampleCounts
    epochs: int
    sampling: str  # without-replacement: the mean over the task's samples; iid: the expected score
    betting: str
    exact: bool  # every sample was scored: the mean is known exactly, and so is the decision
    procedure: str | None = None  # a selection's procedure and levels, None for a task on its own
    final: bool = True  # False for a selection's member whose selection still waits for other tasks
    judge: dict | None = None  # judge-assisted testing: the judge scorer, ratio, labels and judge-only samples used
    job_id: str | None = None  # the certsel job whose certificate this is (None: not kept, or not final yet)

    @property
    def claim(self) -> str:
        what = ("the mean score over the task's samples" if self.sampling == "without-replacement"
                else "the expected score of a sample from the task's distribution")
        epochs = f" (each sample's mean over {self.epochs} epochs)" if self.epochs > 1 else ""
        return f"{what}{epochs}, {self.scorer}, is at least {self.at_least:g}"

    @property
    def e_value(self) -> float:
        return math.exp(min(self.log_e_value, 700.0))

    def words(self) -> str:
        """One line for a terminal."""
        head = (f"certified: {self.claim}" if self.certified else f"{self.status}: not certified that {self.claim}")
        how = "exactly (every sample scored)" if self.exact else f"with probability >= {1 - self.delta:g}"
        if self.procedure:
            how += f" ({self.procedure}{'' if self.final else '; other candidates still running'})"
        bound = "no bound stated" if self.lower_bound is None else f"lower bound {self.lower_bound:.4f}"
        n = self.samples
        when = (f"decided after {n.at_decision} samples; " if self.status in ("certified", "futile", "not needed")
                and not self.exact else "")
        earlier = f" ({n.earlier} by earlier runs of its claim)" if n.earlier else ""
        return (f"{head} {how}; {bound}, e-value {self.e_value:.4g} (needs {self.threshold:.4g}); {when}"
                f"{n.scored} of {n.total} samples scored{earlier}, {n.skipped} skipped")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["claim"] = self.claim
        out["e_value"] = self.e_value
        out["words"] = self.words()
        # JSON has no NaN: an estimate without samples is null
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}
