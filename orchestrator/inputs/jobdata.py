"""Loading and checking the data of a ``certsel run`` job before any Ray or MLflow work, so that bad input (missing
columns, losses out of range, unknown or duplicated candidates, too few items) fails with a one-line error *before* a
tracking run exists."""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
from dataclasses import dataclass, field

import numpy as np

from certsel.config import RunConfig
from certsel.policies.recovery import Recovery, recovery_of
from certsel.policies.regression import Regression
from certsel.policies.registry import did_you_mean
from certsel.workers.replay import LossTable, load_features, load_loss_table
from certsel.workers.tables import read_table, table_format


@dataclass(frozen=True)
class RecoveryScores:
    """A recovery job's scores (candidates x items, the job's candidate order): what its losses were compiled from
    (:meth:`Recovery.losses`), kept to state the certificate as a recovery."""

    claim: Recovery
    reference_name: str
    score: np.ndarray
    reference: np.ndarray
    # an aggregate's item weights w_t N / N_t: a weighted ratio of sums is sum_t w_t E[s_t] / sum_t w_t E[s_ref,t]
    weight: np.ndarray | None = None

    @property
    def on_table(self) -> np.ndarray:
        """Each candidate's recovery over the whole table (the reports' reference value)."""
        if self.weight is None:
            return recovery_of(self.score, self.reference)
        return self.ratio(self.score, self.reference, np.arange(self.score.shape[1]))

    def ratio(self, score: np.ndarray, reference: np.ndarray, items: np.ndarray) -> np.ndarray:
        """sum w s / sum w s_ref over ``items`` (the last axis of ``score`` and ``reference``); nan where the
        reference's sum is 0."""
        w = np.ones(items.size) if self.weight is None else self.weight[items]
        den = (reference * w).sum(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, (score * w).sum(axis=-1) / np.where(den > 0, den, 1.0), np.nan)

    def take(self, idx: np.ndarray) -> RecoveryScores:
        return dataclasses.replace(self, score=self.score[idx], reference=self.reference[idx])


@dataclass(frozen=True)
class PairedLosses:
    """A regression job's raw losses (:class:`~certsel.policies.regression.Regression`): each candidate's and the
    baseline's on every item (a score column read as 1 - score), from which its table's paired losses were compiled;
    the workers label the two sides apart, so a baseline label one job bought serves every later one."""

    claim: Regression
    baseline: str
    human: np.ndarray  # candidates x items
    judge: np.ndarray | None
    baseline_human: np.ndarray  # items
    baseline_judge: np.ndarray | None

    @property
    def on_table(self) -> np.ndarray:
        """Each candidate's E[s] - E[s_base] over the whole table."""
        return self.baseline_human.mean() - self.human.mean(axis=1)

    def take(self, idx: np.ndarray) -> PairedLosses:
        return dataclasses.replace(self, human=self.human[idx], judge=None if self.judge is None else self.judge[idx])


@dataclass(frozen=True)
class PilotStart:
    """Where a fixed sequence started (``scheduling.start: pilot``, policies/pilot.py): the configs before ``start``
    were not tested; ``estimates``: the piloted configs' mean judge losses on ``items`` items (``judge_labels`` judge
    labels); ``checked``: the configs people checked the start on (mean human loss; ``human_labels`` labels)."""

    start: str
    skipped: tuple[str, ...]
    items: int
    margin: int
    estimates: dict[str, float]
    judge_labels: int
    checked: dict[str, float] = field(default_factory=dict)
    human_labels: int = 0
    # a rerun starts where its claims' first selection started (that job), not where its own pilot would (piloted)
    pinned_by: str | None = None
    piloted: str | None = None


@dataclass(frozen=True)
class JobData:
    """The candidates of a job (in testing order for FST) and what labels them: a recorded loss table (replay), live
    candidates with their items, or a user function (python)."""

    table: LossTable | None
    features: np.ndarray | None
    fingerprint: str  # sha256 (16 hex) of the data file(s)
    items: tuple = ()  # live: the Item objects
    live: tuple = ()  # live and python: the candidate configs (id, objective, ...), in job order
    function: object = None  # python: the label function; a registered source: what its load() returns for spec()
    n_source_items: int = 0  # python and registered sources: the number of items
    recovery: RecoveryScores | None = None  # a recovery job's scores (its table's losses come from them)
    paired: PairedLosses | None = None  # a regression job's raw losses (its table's paired losses come from them)
    # losses the policies see -> the certified risk: M of a stacked aggregate (stacked_tasks.py; alpha / M), else 1
    unit: float = 1.0
    aggregate: object = None  # an aggregate job's Aggregate (how its table was stacked)
    servers: str | None = None  # live.serve: the name of the job's server fleet (a Ray actor)
    pilot: PilotStart | None = None  # scheduling.start: pilot: where the sequence starts (engine/pilot.py)

    def policy_config(self, cfg: RunConfig) -> RunConfig:
        """``cfg`` as the policies see it: alpha in the units of the losses they are given (alpha / M for a stacked
        aggregate)."""
        return cfg if self.unit == 1.0 else cfg.model_copy(update={"alpha": cfg.alpha / self.unit})

    @property
    def names(self) -> list[str]:
        if self.table is not None:
            return [str(c) for c in self.table.candidates]
        return [c.id for c in self.live]

    @property
    def n_items(self) -> int:
        if self.table is not None:
            return int(self.table.items.size)
        return len(self.items) if self.items else self.n_source_items

    @property
    def item_ids(self) -> np.ndarray:
        """Each item's id as a string (the table's item column, the items file's ids, or the index a python source is
        asked about)."""
        if self.table is not None:
            return self.table.items.astype(str)
        if self.items:
            return np.array([it.id for it in self.items])
        return np.arange(self.n_source_items).astype(str)

    @property
    def objective(self) -> np.ndarray | None:
        if self.table is not None:
            return self.table.objective
        vals = [c.objective for c in self.live]
        return None if any(v is None for v in vals) else np.array(vals, dtype=np.float64)

    @property
    def true_risk(self) -> np.ndarray | None:
        """Risk on the whole table (replay only: the reference the reports show), in the job's units (an aggregate's:
        the weighted risk over its tasks)."""
        return self.table.true_risk * self.unit if self.table is not None else None


def fingerprint(*paths) -> str:
    h = hashlib.sha256()
    for p in paths:
        if p is None:
            continue
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def _require_columns(path: pathlib.Path, names: set, cfg: RunConfig) -> None:
    wanted = {
        "data.candidate": cfg.data.candidate, "data.item": cfg.data.item, "data.human": cfg.data.human,
        "data.judge": cfg.data.judge, "data.order": cfg.data.order,
        "objective.column": cfg.objective.column if cfg.objective else None, **cfg.data.recovery_columns,
    }
    if cfg.recovery is not None or (cfg.regression is not None and cfg.data.score is not None):
        del wanted["data.human"]  # its losses are compiled from its scores
    for key, col in wanted.items():
        if col is not None and col not in names:
            raise ValueError(f"{path}: missing column {col!r} (named by {key}; the table has {', '.join(sorted(names))})")


def _positions(table: LossTable, names: list[str], what: str) -> np.ndarray:
    have = {str(c): k for k, c in enumerate(table.candidates)}
    unknown = [n for n in names if n not in have]
    if unknown:
        raise ValueError(f"{what}: unknown candidate(s) not in the data: {', '.join(unknown[:5])}"
                         f"{did_you_mean(unknown[0], have)}")
    return np.array([have[n] for n in names], dtype=np.int64)


def _subset(table: LossTable, idx: np.ndarray) -> LossTable:

    def pick(a):
        return None if a is None else a[idx]

    return LossTable(
        candidates=table.candidates[idx], items=table.items, human=table.human[idx], judge=pick(table.judge),
        order=pick(table.order), objective=pick(table.objective), judge_column=table.judge_column,
    )


def load_items(path) -> tuple:
    """Evaluation items from JSON Lines (read line by line: one bad line is named) or any other table format (Parquet,
    CSV): ``id``, ``question`` and ``answers`` (a list of reference strings) or ``answer`` (one string)."""
    import json

    from certsel.workers.live import Item

    path = pathlib.Path(path)
    if table_format(path) == "JSON Lines":
        rows = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    raise ValueError(f"{path}: line {n} is not valid JSON") from None
    else:
        rows = read_table(path, "items file").to_pylist()
    if not rows:
        raise ValueError(f"{path}: no items")
    items, seen = [], set()
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict) or "id" not in row or not isinstance(row.get("question"), str):
            raise ValueError(f"{path}: item {n} needs an id and a question string")
        refs = row.get("answers", [row["answer"]] if "answer" in row else None)
        if refs is None or isinstance(refs, str) or not refs or not all(isinstance(r, str) for r in refs):
            raise ValueError(f"{path}: item {row['id']!r} needs answers (a non-empty list of strings) or answer")
        if str(row["id"]) in seen:
            raise ValueError(f"{path}: duplicated item id {row['id']!r}")
        seen.add(str(row["id"]))
        items.append(Item(str(row["id"]), row["question"], tuple(refs)))
    return tuple(items)


def listed(cfg: RunConfig, cands, where: str) -> tuple:
    """The listed candidates (objects with an ``id``) in job order: ``order`` if given, else the source's order
    restricted to ``candidates``; an id the source does not have is an error naming ``where``."""
    by_id = {c.id: c for c in cands}
    for key in ("candidates", "order"):
        unknown = [n for n in getattr(cfg, key) or () if n not in by_id]
        if unknown:
            raise ValueError(f"{key}: unknown candidate(s) not in {where}: {', '.join(unknown[:5])}"
                             f"{did_you_mean(unknown[0], by_id)}")
    if cfg.order is not None:
        return tuple(by_id[n] for n in cfg.order)
    keep = set(cfg.candidates) if cfg.candidates is not None else set(by_id)
    return tuple(c for c in cands if c.id in keep)


def check_size(cfg: RunConfig, n_items: int, where: str) -> None:
    """Testing policies label n human items and r*n judge-only items, all distinct (i.i.d.), or each from its own order
    over the table (without replacement: n and r*n at most the items)."""
    r = cfg.budget.r if cfg.policy.uses_judge else 0
    if cfg.policy.is_testing and cfg.policy.without_replacement:
        if max(cfg.budget.n, r * cfg.budget.n) > n_items:
            raise ValueError(f"budget: sampling without replacement draws n = {cfg.budget.n} human and r*n = "
                             f"{r * cfg.budget.n} judge-only items from {where}, which has {n_items} "
                             f"(the largest budget.n that fits is {n_items // max(r, 1)})")
        return
    need = cfg.budget.n * (1 + r)
    if cfg.policy.is_testing and need > n_items:
        largest = n_items // (1 + (cfg.budget.r if cfg.policy.uses_judge else 0))
        raise ValueError(f"budget: n*(1+r) = {need} items needed per candidate but {where} has {n_items} "
                         f"(the largest budget.n that fits is {largest})")


def check_count(cfg: RunConfig, K: int) -> None:
    proc = cfg.proc
    if K < proc.min_candidates:
        raise ValueError(f"procedure {cfg.procedure!r} needs at least {proc.min_candidates} candidates")
    if proc.ranking and cfg.pairwise.topk is not None and cfg.pairwise.topk >= K:
        raise ValueError(f"pairwise.topk must be below the number of models ({K}), got {cfg.pairwise.topk}")


def load_live(cfg: RunConfig) -> JobData:
    items = load_items(cfg.live.items)
    check_size(cfg, len(items), str(cfg.live.items))
    cands = listed(cfg, cfg.live.candidates, "live.candidates")
    if cfg.regression is not None:  # the baseline is what the others are compared with, not gated itself
        cands = tuple(c for c in cands if c.id != cfg.regression.baseline)
    check_count(cfg, len(cands))
    return JobData(table=None, features=None, fingerprint=fingerprint(cfg.live.items), items=items, live=cands)


def load_python(cfg: RunConfig) -> JobData:
    from certsel.workers.python_source import load_callable

    src = cfg.source
    fn = load_callable(src.python)
    check_size(cfg, src.items, f"source ({src.python})")
    cands = listed(cfg, src.candidates, "source.candidates")
    check_count(cfg, len(cands))
    features = None
    if src.features is not None:
        features = load_features(src.features, np.arange(src.items))
    return JobData(table=None, features=features, fingerprint=fingerprint(src.features) + ":" + src.python,
                   live=cands, function=fn, n_source_items=src.items)


def _recovery_table(raw, cfg: RunConfig, path: pathlib.Path) -> tuple[LossTable, RecoveryScores]:
    """A recovery job's table: the losses (r s_ref - s + 1) / (1 + r) of its score columns, scores kept beside them (a
    reference with mean score 0 has no recovery to certify)."""
    d, claim = cfg.data, cfg.recovery.claim

    def scores(human, judge):
        return load_loss_table(raw, human=human, judge=judge, candidate=d.candidate, item=d.item, order=d.order,
                               objective=cfg.objective.column if cfg.objective else None, name=str(path))

    cand, ref = scores(d.score, d.judge_score), scores(d.reference, d.judge_reference)
    zero = [str(c) for c, m in zip(cand.candidates, ref.human.mean(axis=1), strict=True) if m == 0.0]
    if zero:
        raise ValueError(f"{path}: data.reference column {d.reference!r} is 0 on every item for candidate(s) "
                         f"{', '.join(zero[:5])}: recovery against a zero reference score is undefined")
    table = dataclasses.replace(cand, human=claim.losses(cand.human, ref.human),
                                judge=None if cand.judge is None else claim.losses(cand.judge, ref.judge))
    return table, RecoveryScores(claim, cfg.recovery_reference, cand.human, ref.human)


def _regression_table(raw, cfg: RunConfig, path: pathlib.Path) -> tuple[LossTable, PairedLosses]:
    """A regression job's table: each candidate's paired losses (l - b + 1) / 2 against the baseline's on the same
    items (score columns read as losses 1 - score), the baseline's row left out and every raw loss kept beside."""
    d, reg = cfg.data, cfg.regression
    scores = d.score is not None
    judge_col = d.judge_score if d.judge_score is not None else d.judge
    full = load_loss_table(raw, human=d.score if scores else d.human, judge=judge_col, candidate=d.candidate,
                           item=d.item, order=d.order, objective=cfg.objective.column if cfg.objective else None,
                           name=str(path))
    if scores:
        full = dataclasses.replace(full, human=1.0 - full.human)
    if d.judge_score is not None:
        full = dataclasses.replace(full, judge=1.0 - full.judge)
    b = _positions(full, [reg.baseline], "regression.baseline")[0]
    rest = np.flatnonzero(np.arange(len(full.candidates)) != b)
    if rest.size == 0:
        raise ValueError(f"regression.baseline: {reg.baseline!r} is the table's only candidate; nothing to compare")
    cand = _subset(full, rest)
    claim = reg.claim
    table = dataclasses.replace(cand, human=claim.losses(cand.human, np.broadcast_to(full.human[b], cand.human.shape)),
                                judge=None if cand.judge is None else
                                claim.losses(cand.judge, np.broadcast_to(full.judge[b], cand.judge.shape)))
    return table, PairedLosses(claim, reg.baseline, cand.human, cand.judge, full.human[b],
                               None if full.judge is None else full.judge[b])


def load_replay(cfg: RunConfig) -> JobData:
    """The loss table (and features for Cer-Eval); a recovery job's compiled from its scores."""
    path = pathlib.Path(cfg.data.path)
    raw = read_table(path, "loss table")
    _require_columns(path, set(raw.column_names), cfg)
    recovery = paired = None
    if cfg.recovery is not None:
        table, recovery = _recovery_table(raw, cfg, path)
    elif cfg.regression is not None:
        table, paired = _regression_table(raw, cfg, path)
    else:
        table = load_loss_table(
            raw, human=cfg.data.human, judge=cfg.data.judge, candidate=cfg.data.candidate, item=cfg.data.item,
            order=cfg.data.order, objective=cfg.objective.column if cfg.objective else None, name=str(path),
        )
    idx = None
    if cfg.order is not None:
        idx = _positions(table, cfg.order, "order")
    elif cfg.candidates is not None:
        # keep the table's (order-column) sequence, restricted to the listed candidates
        keep = set(cfg.candidates)
        unknown = sorted(keep - {str(c) for c in table.candidates})
        if unknown:
            raise ValueError(f"candidates: unknown candidate(s) not in the data: {', '.join(unknown[:5])}"
                             f"{did_you_mean(unknown[0], map(str, table.candidates))}")
        idx = _positions(table, [str(c) for c in table.candidates if str(c) in keep], "candidates")
    if idx is not None:
        table = _subset(table, idx)
        recovery = None if recovery is None else recovery.take(idx)
        paired = None if paired is None else paired.take(idx)
    K, I = table.human.shape
    check_count(cfg, K)
    check_size(cfg, I, "the table")
    features = None
    if cfg.data.features is not None:
        features = load_features(cfg.data.features, table.items)
    return JobData(table=table, features=features, fingerprint=fingerprint(path, cfg.data.features), recovery=recovery,
                   paired=paired)
