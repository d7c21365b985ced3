"""The checks of a whole job that span its sections (the procedure against the policy, the policy against its source,
recovery, tasks and aggregates): :class:`JobChecks`, mixed into :class:`~.schema.RunConfig`, whose one validator calls
them."""

from __future__ import annotations


from pydantic import ValidationError

from certsel.policies.procedures import PROCEDURES
from certsel.policies.pair_bets import pair_bet
from certsel.policies.kinds import Family, kinds_of

from certsel.policies.registry import did_you_mean

from .base import no_duplicates
from .sections import PairwiseConfig


class JobChecks:
    """RunConfig's cross-section checks (its fields are read from ``self``)."""

    def task_configs(self) -> list:
        """The job of each task (``tasks``): this job with the task's table, target and budget,
        named ``JOB/TASK``; each validated as a job of its own (errors name the task)."""
        if not self.tasks:
            raise ValueError("tasks: list at least one task")
        no_duplicates([t.name for t in self.tasks], "task names")
        proc = self.proc
        if proc.ranking or proc.gates:
            what = "ranks models" if proc.ranking else "gates each candidate on one table"
            raise ValueError(f"tasks: procedure {self.procedure!r} {what}; a multi-task job certifies each candidate on "
                             "every task (fst, bonferroni, holm)")
        base = self.model_dump(exclude={"tasks", "aggregate", "alpha", "recovery", "data"}, exclude_unset=False)
        out = []
        for t in self.tasks:
            raw = {**base, "name": f"{self.name}/{t.name}", "data": t.data.model_dump(),
                   "budget": {**base["budget"], **t.budget}}
            if t.alpha is not None:
                raw["alpha"] = t.alpha
            elif t.recovery is not None:
                raw["recovery"] = t.recovery.model_dump()
            elif self.recovery is not None:
                raw["recovery"] = self.recovery.model_dump()
            else:
                raw["alpha"] = self.alpha
            try:
                out.append(type(self).model_validate(raw))
            except ValidationError as err:
                e = err.errors()[0]
                loc = ".".join(str(p) for p in e["loc"])
                raise ValueError(f"task {t.name!r}: " + (f"{loc}: " if loc else "")
                                 + e["msg"].replace("Value error, ", "")) from None
        return out

    def _check_aggregate(self) -> None:
        """An aggregate is over tasks, with one target: the job's."""
        if self.tasks is None:
            raise ValueError("aggregate: weighs the tasks of a multi-task job; give tasks: [...]")
        for t in self.tasks:
            if t.alpha is not None or t.recovery is not None:
                raise ValueError(f"aggregate: task {t.name!r} sets its own target; an aggregate job has one, the "
                                 "job's alpha (or recovery)")
            if t.budget:
                raise ValueError(f"aggregate: task {t.name!r} sets its own budget; an aggregate job is one test on "
                                 "the stacked tasks, with the job's budget")
        w = self.aggregate.weights
        if isinstance(w, dict):
            names = [t.name for t in self.tasks]
            missing, extra = [n for n in names if n not in w], [n for n in w if n not in names]
            if missing or extra:
                raise ValueError("aggregate.weights: give a weight for every task and only for tasks"
                                 + (f" (missing: {', '.join(missing)})" if missing else "")
                                 + (f" (not a task: {', '.join(extra)})" if extra else ""))

    def task_weights(self, sizes: list[int]) -> list[float]:
        """The aggregate's weights in task order, normalised to sum to 1 (``sizes``: the tasks' item counts, for
        ``weights: size``)."""
        w = self.aggregate.weights
        raw = ([1.0] * len(self.tasks) if w == "equal" else [float(n) for n in sizes] if w == "size"
               else [float(w[t.name]) for t in self.tasks])
        total = sum(raw)
        return [x / total for x in raw]

    def _check_recovery(self) -> None:
        """A recovery job reads score columns of a table and tests them at a risk target."""
        cols = self.data.recovery_columns if self.data is not None else {}
        if self.regression is not None:
            self._check_regression(cols)
            return
        if self.recovery is None:
            if cols:
                raise ValueError(f"{', '.join(cols)}: score columns are read by recovery jobs only (set recovery: "
                                 "r to certify recovery >= r; a risk job reads data.human)")
            return
        if self.live is not None:
            if self.live.reference is None:
                raise ValueError("recovery: a live job needs live.reference (the model whose score the candidates "
                                 "must recover: a candidate's id or an endpoint)")
        elif self.data is None and self.labels is None:  # a registered source says whether it has a reference
            raise ValueError(f"recovery: needs a table with score columns (data: with data.score and "
                             f"data.reference) or a live job with live.reference; a {self.source_kind} source has "
                             "neither")
        self._check_compared("recovery", "a reference")
        if self.policy.without_replacement:  # its bounds invert R-Eval over the recovery ratio: i.i.d. only so far
            raise ValueError("recovery: policy.sampling 'without-replacement' is not available for recovery jobs; "
                             "use the default 'iid'")
        if self.data is None:
            return
        missing = [k for k in ("score", "reference") if getattr(self.data, k) is None]
        if missing:
            raise ValueError(f"recovery: needs {' and '.join('data.' + k for k in missing)} (the candidate's and "
                             "the reference model's per-item scores, in [0, 1])")
        if self.data.judge is not None:
            raise ValueError("recovery: data.judge is a loss column; a recovery job's judge is data.judge_score "
                             "and data.judge_reference (the judge's scores of the candidate and of the reference)")
        if (self.data.judge_score is None) != (self.data.judge_reference is None):
            raise ValueError("recovery: give both data.judge_score and data.judge_reference, or neither")

    def _check_compared(self, key: str, against: str) -> None:
        """A claim against another model is a testing policy's, candidate by candidate."""
        if not self.policy.is_testing:
            raise ValueError(f"{key}: needs a testing policy ({', '.join(kinds_of(Family.TESTING))}), not "
                             f"{self.policy.kind!r}")
        if self.proc.ranking:
            raise ValueError(f"{key}: certifies candidates against {against}; procedure {self.procedure!r} "
                             "ranks them against each other")

    def _check_regression(self, cols: dict) -> None:
        """A regression job compares each candidate with its baseline, paired on the same items: a table's, live models,
        or a registered source's that pairs (an lm-eval task's models)."""
        if self.data is None and self.live is None and self.labels is None:
            raise ValueError(f"regression: compares candidates of a table (data:), live models (live:) or a labels: "
                             f"source's with a baseline among them; a {self.source_kind} source is not supported yet "
                             "(gate its candidates on alpha or recovery)")
        self._check_compared("regression", "a baseline")
        self._check_listed_baseline()
        if self.labels is not None:  # the source kind says whether it pairs (orchestrator.inputs.sources)
            return
        if self.live is not None:
            ref = self.live.reference
            if isinstance(ref, str) and ref != self.regression.baseline:
                raise ValueError(f"live.reference: {ref!r} is not the regression's baseline "
                                 f"{self.regression.baseline!r}; a regression job's reference is its baseline (leave "
                                 "live.reference out)")
            if self.live.judge is not None and self.live.judge.mode == "pairwise":
                raise ValueError("regression: a pairwise judge says which answer is better, not each answer's loss; "
                                 "use judge.mode 'answer' or 'grade'")
            return
        extra = sorted(set(cols) - {"data.score", "data.judge_score"})
        if extra:
            raise ValueError(f"{', '.join(extra)}: a recovery job's reference columns; a "
                             "regression job's baseline is a candidate of the table (regression.baseline)")
        if self.data.score is not None and "human" in self.data.model_fields_set:
            raise ValueError("regression: give data.score (scores, higher is better) or data.human (losses), not both")
        if self.data.judge is not None and self.data.judge_score is not None:
            raise ValueError("regression: give data.judge (judge losses) or data.judge_score (judge scores), not both")

    def _check_listed_baseline(self) -> None:
        if self.candidates is not None and self.regression.baseline in self.candidates:
            raise ValueError(f"candidates: lists the baseline {self.regression.baseline!r}; it is what the others "
                             "are compared with, not gated itself")
        if self.order is not None and self.regression.baseline in self.order:
            raise ValueError(f"order: lists the baseline {self.regression.baseline!r}; it is what the others are "
                             "compared with")

    def _check_procedure(self) -> None:
        proc, kind = self.proc, self.policy.kind
        if self.series is not None and not proc.gates:
            raise ValueError(f"series: a release series is gated (procedure gate, or certsel gate), not run with "
                             f"procedure {self.procedure!r}")
        if proc.gates and self.policy.is_testing and self.scheduling.futility != self.delta:
            raise ValueError(f"procedure {self.procedure!r} fails a candidate when R >= alpha is certified at delta: "
                             f"scheduling.futility must be delta ({self.delta:g}) or left out, got "
                             f"{self.scheduling.futility}")
        if self.policy.is_testing and not proc.testing:
            raise ValueError(f"procedure {self.procedure!r} ranks models with policy.kind "
                             f"{' or '.join(repr(n) for n in kinds_of(Family.ESTIMATION))}")
        if not self.policy.is_testing and not proc.estimation:
            raise ValueError(f"procedure {self.procedure!r} needs e-values ({', '.join(kinds_of(Family.TESTING))}); "
                             f"policy {kind!r} supports {', '.join(n for n, p in PROCEDURES.items() if p.estimation)}")
        if self.order is not None and not proc.needs_order:
            raise ValueError(f"order is the fixed sequence of procedure 'fst', not {self.procedure!r}")
        if self.scheduling.prune and self.objective is None:
            raise ValueError("scheduling.prune stops candidates whose objective cannot beat a certified one's: set "
                             "objective.column")
        if self.scheduling.prune and not proc.allows_prune:
            allowed = ", ".join(repr(n) for n, p in PROCEDURES.items() if p.allows_prune)
            raise ValueError(f"scheduling.prune applies to procedure {allowed} only (elsewhere it could change the "
                             "selection, or the procedure already stops what cannot matter)")
        if self.scheduling.start == "pilot":
            if not proc.needs_order:
                raise ValueError(f"scheduling.start: pilot starts a fixed sequence (procedure 'fst'), not "
                                 f"{self.procedure!r}")
            if self.data is None or self.data.judge is None or self.recovery is not None or self.tasks:
                raise ValueError("scheduling.start: pilot needs a replay job with a judge column (data.judge): the "
                                 "pilot reads the judge's losses (live jobs, recovery and multi-task jobs: not yet)")
        if proc.needs_objective and self.objective is None:
            raise ValueError(f"procedure {self.procedure!r} selects by an objective: set objective.column")
        if not proc.ranking and self.pairwise != PairwiseConfig():  # options set for a procedure that ignores them
            raise ValueError(f"pairwise: options of a ranking (procedure 'pairwise'), not of {self.procedure!r}")
        bet = None if self.pairwise.bet is None else pair_bet(self.pairwise.bet)
        if proc.ranking and bet is not None and bet.sized and not self.policy.policy_kind.banks(self.policy.radius):
            raise ValueError(f"pairwise.bet {bet.name!r} needs pair policies that take a bet (policy.kind 'seq' with radius "
                             f"'betting'), not policy.kind {self.policy.kind!r} with radius {self.policy.radius!r}")
        if proc.ranking and self.pairwise.topk is not None:
            models = self.candidates or self.order
            if models is not None and self.pairwise.topk >= len(models):
                raise ValueError(f"pairwise.topk must be below the number of models ({len(models)}), got "
                                 f"{self.pairwise.topk}")

    def check_policy_inputs(self, has: dict) -> None:
        """What the policy needs from the source: a judge, features, judge-only labels. ``has``: ``judge`` and
        ``features`` (bools) and the keys that give them, for messages."""
        kind = self.policy.kind
        if self.scheduling.futility is not None and not self.policy.is_testing:
            raise ValueError(f"scheduling.futility applies to the testing policies "
                             f"({', '.join(kinds_of(Family.TESTING))}); "
                             f"policy {kind!r} already stops once R >= alpha is certified at its own level")
        if self.policy.uses_judge and self.budget.r < 1:
            raise ValueError(f"policy '{kind}' needs budget.r >= 1 judge-only labels per human label")
        if self.policy.uses_judge and not has["judge"]:
            raise ValueError(f"policy '{kind}' needs {has['judge_key']} (the judge); without a judge, policy.kind: "
                             "r-eval tests on human labels alone")
        if self.policy.needs_features and not has["features"]:
            other = ", or policy.partition 'judge' with " + has["judge_key"] if "partition" in self.policy.policy_kind.takes \
                else ""
            raise ValueError(f"policy '{kind}' needs {has['features_key']} (item embeddings for the partition){other}")
        if self.policy.judge_first and not has["judge"]:
            if self.policy.partition == "judge":
                raise ValueError(f"policy.partition 'judge' needs {has['judge_key']} (the judge)")
            raise ValueError(f"policy '{kind}' needs {has['judge_key']} (the judge's loss on every item)")

    def _source_has(self) -> dict:
        if self.data is not None:
            judge = self.data.judge if self.recovery is None else self.data.judge_score
            if self.regression is not None:
                judge = self.data.judge or self.data.judge_score
            return {"judge": judge is not None,
                    "judge_key": "data.judge" if self.recovery is None else "data.judge_score and data.judge_reference",
                    "features": self.data.features is not None, "features_key": "data.features"}
        if self.live is not None:
            return {"judge": self.live.judge is not None, "judge_key": "live.judge",
                    "features": self.live.features is not None, "features_key": "live.features"}
        return {"judge": self.source.judge, "judge_key": "source.judge: true",
                "features": self.source.features is not None, "features_key": "source.features"}

    def _check_ids(self, ids: set, where: str) -> None:
        for key in ("candidates", "order"):
            unknown = sorted(set(getattr(self, key) or ()) - ids)
            if unknown:
                raise ValueError(f"{key}: unknown candidate(s) not in {where}: {', '.join(unknown[:5])}"
                                 f"{did_you_mean(unknown[0], ids)}")

    def _check_objectives(self, cands, where: str) -> None:
        if self.objective is not None:
            missing = [c.id for c in cands if c.objective is None]
            if missing:
                raise ValueError(f"objective: {where} candidate(s) without an objective value: {', '.join(missing[:5])}")

    def _check_fixed_order(self, has_order_column: bool) -> None:
        if self.proc.needs_order and not has_order_column and self.order is None:
            raise ValueError(f"procedure {self.procedure!r} needs data.order (a column) or order (a list of candidates)")

    def _check_replay(self) -> None:
        self._check_fixed_order(self.data.order is not None)
        if self.order is not None and self.candidates is not None and set(self.order) != set(self.candidates):
            extra = sorted(set(self.order) ^ set(self.candidates))
            raise ValueError(f"order and candidates must name the same candidates (differ in: {', '.join(extra)})")

    def _check_live(self) -> None:
        self._check_ids({c.id for c in self.live.candidates}, "live.candidates")
        self._check_objectives(self.live.candidates, "live")

    def _check_python(self) -> None:
        self._check_ids({c.id for c in self.source.candidates}, "source.candidates")
        self._check_objectives(self.source.candidates, "source")
