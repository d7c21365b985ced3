"""What every ``certsel audit`` shares: the result, exact binomial bounds, repetitions in worker processes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from scipy import stats

from certsel.config import RunConfig

BUDGET_GRID = 10  # budgets at which estimates are compared (FT-Eval's Run(E, N, k))
FT_NOTE = ("FT-Eval column: with the dynamic tolerance eps = margin + t s/sqrt(N) the TOST passes exactly when "
           "|bias| < margin (the t term cancels), so it is a point check of the bias at the full budget against "
           "the margin Algorithm 1 selects, not a test. Estimates of a job that stopped early are biased by the "
           "stopping rule (a candidate stops when its evidence is strong), which is why jobs report bounds, not "
           "point estimates, as evidence.")


def clopper_pearson(k: int, n: int, level: float = 0.99) -> tuple[float, float]:
    """One-sided exact binomial bounds (lower, upper) at ``level``."""
    lo = 0.0 if k == 0 else float(stats.beta.ppf(1 - level, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(level, k + 1, n - k))
    return lo, hi


AUDIT_CONFIDENCE = 0.99  # of the Clopper-Pearson bounds behind every verdict


class Verdict(StrEnum):
    """What a failure rate measured over repetitions says about a level it must not exceed."""

    CONFIRMED = "confirmed"  # the upper Clopper-Pearson bound is <= the level
    INCONCLUSIVE = "inconclusive"  # the level lies between the bounds: more repetitions needed
    FAILED = "failed"  # the lower bound is above the level: the guarantee is violated

    @staticmethod
    def of(k: int, n: int, level: float) -> "Verdict":
        lo, hi = clopper_pearson(k, n, AUDIT_CONFIDENCE)
        if lo > level:
            return Verdict.FAILED
        return Verdict.CONFIRMED if hi <= level else Verdict.INCONCLUSIVE

    @staticmethod
    def overall(familywise: "Verdict", rows) -> "Verdict":
        """The audit's verdict on the job's (family-wise) guarantee: failed when it or any row failed, else its own."""
        if familywise is Verdict.FAILED or any(v is Verdict.FAILED for v in rows):
            return Verdict.FAILED
        return familywise


def failure_cells(k: int, reps: int, level: float) -> dict:
    """A row's failure rate with its bounds and its verdict against ``level``."""
    lo, hi = clopper_pearson(k, reps, AUDIT_CONFIDENCE)
    return {"failure": k / reps, "failure_upper": hi, "failure_lower": lo, "level": float(level),
            "verdict": Verdict.of(k, reps, level)}


def overall_cells(k_fail: int, reps: int, delta: float, rows: list) -> dict:
    """The family-wise failure rate against delta and the audit's verdict (:meth:`Verdict.overall`)."""
    lo, hi = clopper_pearson(k_fail, reps, AUDIT_CONFIDENCE)
    fam = Verdict.of(k_fail, reps, delta)
    return {"familywise_failure": k_fail / reps, "failure_upper": hi, "failure_lower": lo,
            "familywise_verdict": fam, "verdict": Verdict.overall(fam, [r["verdict"] for r in rows]),
            "reps_to_confirm": reps_to_confirm(k_fail, reps, delta) if fam is Verdict.INCONCLUSIVE else None}


def reps_to_confirm(k: int, n: int, level: float) -> int | None:
    """About how many repetitions would confirm ``level`` at the observed rate k/n (None: rate not below it)."""
    rate = k / n
    if rate >= level:
        return None

    def confirmed(m: int) -> bool:
        return clopper_pearson(math.ceil(rate * m), m, AUDIT_CONFIDENCE)[1] <= level

    lo, hi = n, n
    while not confirmed(hi):
        lo, hi = hi, hi * 2
        if hi > 10**9:
            return None
    while hi - lo > max(1, lo // 100):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if confirmed(mid) else (mid, hi)
    return hi


@dataclass
class AuditResult:
    cfg: RunConfig
    reps: int
    rows: list  # one dict per candidate (or per pair of a ranking)
    overall: dict
    unit: str = "candidate"

    def table(self) -> str:
        """The per-candidate (per-pair) Markdown table (the docs carry these)."""
        if self.unit == "pair":
            return self._pair_table()
        head = ["candidate", "true R", "H0: R > alpha", "level", "failure", "99% CP upper", "verdict", "power", "coverage",
                "labels mean (q10/q50/q90)", "FT-Eval margin", "abs(bias) < margin", "RMSE"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            q = r["labels_q"]
            margin = "-" if r["ft_margin"] is None else f"{r['ft_margin']:.3f}"
            tost = "-" if r["ft_pass"] is None else ("pass" if r["ft_pass"] else "fail")
            cells = [r["candidate"], f"{r['true_risk']:.4f}", "yes" if r["h0"] else "no", f"{r['level']:.4g}",
                     _pct(r["failure"]), _pct(r["failure_upper"]), r["verdict"] or "-", _pct(r["power"]),
                     _pct(r["coverage"]), f"{r['labels_mean']:.1f} ({q[0]:.0f}/{q[1]:.0f}/{q[2]:.0f})", margin, tost,
                     f"{r['rmse']:.4f}"]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", FT_NOTE]
        return "\n".join(lines)

    def _pair_table(self) -> str:
        head = ["pair", "true difference", "level", "ordered", "wrong order", "tied", "false tie",
                "wrong claim 99% CP upper", "verdict", "interval coverage", "items mean (q10/q50/q90)"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            q = r["labels_q"]
            cells = [r["candidate"], f"{r['true_risk']:+.4f}", f"{r['level']:.3g}", _pct(r["ordered"]),
                     _pct(r["wrong_order"]), _pct(r["tied"]), _pct(r["false_tie"]), _pct(r["failure_upper"]),
                     r["verdict"], _pct(r["coverage"]), f"{r['labels_mean']:.1f} ({q[0]:.0f}/{q[1]:.0f}/{q[2]:.0f})"]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "| model | true rank | rank interval covers it | miss 99% CP upper |", "|---|---|---|---|"]
        lines += [f"| {m['model']} | {m['true_rank']} | {m['coverage']:.3f} | {m['upper']:.3f} |"
                  for m in self.overall["rank_intervals"]]
        return "\n".join(lines)

    def summary(self) -> str:
        o = self.overall
        if self.unit == "pair":
            worst = max(r["failure"] for r in self.rows)
            eps = "" if o["epsilon"] is None else f", epsilon = {o['epsilon']:g}"
            return (f"pairwise {self.cfg.policy.kind} ranking of {o['models']} models (goal {o['goal']}{eps}), "
                    f"delta = {self.cfg.delta:g} over {o['pairs']} pairs ({o['pair_delta']:.3g} each), "
                    f"{self.reps} repetitions: worst per-pair rate of a wrong order or false tie {worst:.3f}; "
                    f"repetitions with a wrong order {o['wrong_order_rate']:.3f}, a false tie "
                    f"{o['false_tie_rate']:.3f}, a rank interval missing {o['rank_interval_miss_rate']:.3f}, a wrong "
                    f"rank group {o['rank_group_error_rate']:.3f}; family-wise failure (any wrong claim) "
                    f"{o['familywise_failure']:.3f} (99% CP upper {o['failure_upper']:.3f}); "
                    f"{o['mean_certified']:.1f} orders and {o['mean_tied']:.1f} ties certified on average, "
                    f"{o['evaluations_mean']:.0f} of {o['evaluations_full']} model evaluations; "
                    + self.verdict_words())
        worst = max((r["failure"] for r in self.rows if r["failure"] is not None), default=0.0)
        return (f"{self.cfg.policy.kind} ({self.cfg.policy.strategy.describe()}), alpha = {self.cfg.alpha:g}, delta = "
                f"{self.cfg.delta:g}, n = {self.cfg.budget.n}, {self.reps} repetitions: worst per-candidate failure "
                f"{worst:.3f}, family-wise failure of {o['procedure']} {o['familywise_failure']:.3f} "
                f"(99% CP upper {o['failure_upper']:.3f}); " + self.verdict_words())

    def verdict_words(self) -> str:
        """The verdict on the job's guarantee (family-wise, at delta), and what it would take."""
        o = self.overall
        v = Verdict(o["verdict"])
        rows = [r for r in self.rows if r["verdict"] is not None]
        open_rows = sum(r["verdict"] == Verdict.INCONCLUSIVE for r in rows)
        tail = (f"; {open_rows} of {len(rows)} per-{self.unit} levels inconclusive with {self.reps} repetitions"
                if open_rows else "")
        if v is Verdict.FAILED:
            return "FAILED: the guarantee is violated on this data (a failure rate's lower bound is above its level)"
        if v is Verdict.CONFIRMED:
            return f"CONFIRMED: family-wise failure <= delta = {self.cfg.delta:g} at 99% confidence" + tail
        need = o.get("reps_to_confirm")
        return (f"INCONCLUSIVE: {self.reps} repetitions cannot confirm delta = {self.cfg.delta:g} at 99% confidence"
                + (f" (about {need} would, at the observed rate)" if need else "") + tail)


def _pct(x):
    return "-" if x is None else f"{x:.3f}"


def job_features(cfg, table):
    """Item embeddings for Cer-Eval's 1-NN partition (None when the job does not use them)."""
    if not cfg.policy.needs_features:
        return None
    from certsel.workers.replay import load_features

    return load_features(cfg.data.features, table.items)


def repeat(fn, jobs: list, workers: int, progress) -> list:
    """``fn`` over the jobs, in worker processes when ``workers`` > 1; results in job order, whatever ``workers``."""
    def collect(results) -> list:  # in job order, reporting each as it arrives
        out = []
        for res in results:
            out.append(res)
            if progress is not None:
                progress(len(out), len(jobs))
        return out

    if workers <= 1 or len(jobs) <= 1:
        return collect(map(fn, jobs))
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn" if multiprocessing.get_start_method() != "fork" else "fork")
    with ProcessPoolExecutor(workers, mp_context=ctx) as ex:
        return collect(ex.map(fn, jobs, chunksize=max(1, len(jobs) // (4 * workers))))


