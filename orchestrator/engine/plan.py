"""A job's plan: one typed spec per candidate and the arrays every candidate shares.

Independent of where candidates run. Every candidate is labelled on the same seeded item order (the paper's protocol),
so the plan is a deterministic function of the configuration, the data and the seed: a resumed driver rebuilds exactly
the same one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from certsel.config import RunConfig
from certsel.policies.kinds import PolicySettings
from certsel.workers.contracts import CandidateSpec, JobArrays
from certsel.workers.label_store import LabelStore, identity_key
from certsel.workers.replay import label_orders

from certsel.orchestrator.inputs.jobdata import JobData
from certsel.orchestrator.inputs.sources import source_of

from .claims import claim_starts


def store_identity(cfg: RunConfig, data: JobData, k: int) -> str | None:
    """Candidate ``k``'s identity in the label store (None: the store is off, or its source has none)."""
    if cfg.state.store is None:
        return None
    identity = source_of(cfg).label_identity(cfg, data, k)
    # the loss's units too: a stacked aggregate divides them by M
    return None if identity is None else identity_key({**identity, "unit": data.unit})


@dataclass
class JobPlan:
    """Specs and shared arrays of a job (see the module docstring). ``rows[name]`` holds a replay candidate's
    (human, judge) losses; ``arrays`` the item order (testing), the features (estimation) and the items (live)."""

    cfg: RunConfig
    data: JobData
    job_dir: str | None = None
    specs: list = field(init=False)
    arrays: JobArrays = field(init=False)
    rows: dict = field(init=False)

    def __post_init__(self):
        cfg, table = self.cfg, self.data.table
        names = self.data.names
        K, I = len(names), self.data.n_items
        self.procedure = cfg.proc
        # an annotation queue (people label): the wait between looks while every candidate waits
        self.waiter = source_of(cfg).queue_waiter(cfg, self.data)
        self.testing = cfg.policy.is_testing
        self.uses_judge = cfg.policy.uses_judge
        # judge strata (Cer-Eval's, the judge-stratified test): the judge on every item first
        self.judge_strata = cfg.policy.judge_first
        n, r = cfg.budget.n, (cfg.budget.r if self.uses_judge else 0)
        self.n, self.r = n, r
        with_judge = self.uses_judge or self.judge_strata
        paired = self.data.paired
        if paired is not None:  # a regression job: each side raw, paired on the workers (workers/paired.py)
            judge = paired.baseline_judge if with_judge else None
            self.rows = {nm: (paired.human[k], paired.judge[k] if with_judge else None, paired.baseline_human, judge)
                         for k, nm in enumerate(names)}
        elif table is not None:
            self.rows = {nm: (table.human[k], table.judge[k] if with_judge else None) for k, nm in enumerate(names)}
        else:  # live or python: each actor builds its candidates' sources from their specs
            self.rows = {}
        order = features = None
        deltas = self.procedure.candidate_deltas(cfg.delta, K)
        pol = cfg.policy
        alpha = cfg.alpha / self.data.unit  # the policies' units: a stacked aggregate's losses are divided by M
        if self.procedure.ranking:  # label servers: the pairwise comparisons live in the driver
            kind, settings = None, [None] * K
        elif self.testing:
            wor = pol.without_replacement
            order = label_orders(I, cfg.seed, n, r, wor)
            kind = pol.policy_kind
            settings = [PolicySettings(alpha=alpha, delta=cfg.delta, budget=n, seed=(cfg.seed, k),
                                       betting=pol.strategy, r=r, observation=pol.observation,
                                       sampling=pol.sampling_for(I), ci_delta=float(deltas[k]),
                                       intervals=cfg.tracking.intervals, futility=cfg.scheduling.futility)
                        for k in range(K)]
        else:
            features = self.data.features
            kind = pol.policy_kind
            settings = [PolicySettings(alpha=alpha, delta=float(deltas[k]), budget=n, seed=(cfg.seed, k),
                                       radius=pol.radius, partition=pol.partition) for k in range(K)]
        self.arrays = JobArrays(human_items=None if order is None else order[0],
                                judge_items=None if order is None else order[1], features=features,
                                items=self.data.items if cfg.live is not None else ())
        every = cfg.state.snapshot_every if self.job_dir is not None else None
        if cfg.state.store is not None:  # the file made once here, before the hosts open it together
            LabelStore(cfg.state.store).close()
        stored = [self._stored(k) for k in range(K)]
        claims = claim_starts(cfg, self.data, self.job_dir)
        self.specs = [CandidateSpec(nm, self._source(k, with_judge), kind, settings[k], self.job_dir, every,
                                    *stored[k], claims[k]) for k, nm in enumerate(names)]

    def _stored(self, k: int) -> tuple[str | None, str | None]:
        """The label store's file and candidate ``k``'s identity in it (None, None: no reuse)."""
        identity = store_identity(self.cfg, self.data, k)
        return (None, None) if identity is None else (str(self.cfg.state.store), identity)

    def _source(self, k: int, with_judge: bool):
        return source_of(self.cfg).spec(self.cfg, self.data, k, with_judge)

    def extensions(self) -> list:
        """Objects from user code that the specs carry (they must reach the workers)."""
        # one source spec is enough: every candidate's spec is of the same class, from one module
        out = [self.cfg.policy.policy_kind, *(spec.source for spec in self.specs[:1])]
        if self.testing:
            out.append(self.cfg.policy.strategy)
        if self.cfg.source is not None:
            out.append(self.data.function)
        return out

    def full_budget(self) -> dict:
        """Labels and requests if every candidate ran to its whole budget."""
        K, I = len(self.data.names), self.data.n_items
        if self.procedure.ranking or not self.testing or self.judge_strata:
            per = min(self.n, I)
            if self.judge_strata:  # the judge on every item first: its generation and its verdict
                return {"human": K * per, "judge": K * I, "requests": 2 * K * I}
            return {"human": K * per, "judge": 0, "requests": K * per}
        items = self.n * (1 + self.r)
        return {"human": K * self.n, "judge": K * items if self.uses_judge else 0,
                "requests": K * items * (2 if self.uses_judge else 1)}
