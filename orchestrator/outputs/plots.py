"""The report's plots: bounds against alpha, e-values against their thresholds, the selection against the budget, and a
ranking's certified pairs. Labels at least 8 pt, thresholds drawn, e-values on a log axis, the selection marked.

The plots read a :class:`PlotInputs` (the certificate and the few figures of the job it does not hold), so that they
can be drawn by another process (:mod:`.output_process`) without the job's result.
"""

from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass

import numpy as np

from .selection_schema import Certificate

_FONT = 8


@dataclass(frozen=True)
class EvaluePath:
    """One candidate's log e-value after each human label."""

    name: str
    log_e: np.ndarray
    certified: bool
    selected: bool


@dataclass(frozen=True)
class PlotInputs:
    """What the plots draw: the certificate, and from the job the e-value paths, the strictest threshold (in words),
    alpha and the budget curve."""

    cert: Certificate
    alpha: float | None
    paths: tuple[EvaluePath, ...]
    threshold: float | None  # 1 / the strictest decision level
    threshold_words: str
    budget_curve: tuple[tuple[int, float | None], ...]
    objective: str


def plot_inputs(result, cert: Certificate) -> PlotInputs:
    """The :class:`PlotInputs` of a finished job (a :class:`~certsel.orchestrator.results.records.JobResult`)."""
    cfg = result.cfg
    certified = set(result.certified)
    paths = tuple(EvaluePath(r.name, np.asarray(r.path, dtype=np.float64), r.name in certified,
                             r.name == result.selected) for r in result.records if r.path)
    threshold = words = None
    if paths:
        threshold, words = 1.0 / min(result.levels), cfg.proc.threshold_words(cfg.delta, len(result.records))
    return PlotInputs(cert=cert, alpha=None if cert.claim else cfg.alpha, paths=paths, threshold=threshold,
                      threshold_words=words or "", budget_curve=tuple(result.budget_curve or ()),
                      objective=cfg.objective.column if cfg.objective else "objective")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": _FONT + 1, "axes.titlesize": _FONT + 2})
    return plt


def _save(fig, path: pathlib.Path) -> pathlib.Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def bounds_plot(inputs: PlotInputs, path: pathlib.Path) -> pathlib.Path | None:
    """Each candidate's own upper bound on R (a bar from its estimate, at its test's level) against alpha."""
    cert, alpha = inputs.cert, inputs.alpha
    if cert.claim:
        return _recovery_bounds_plot(cert, path)
    rows = [c for c in cert.candidates if c.upper_bound is not None and c.labels_human > 0]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, max(2.5, 0.22 * len(rows) + 1.2)))
    y = np.arange(len(rows))[::-1]
    for yi, c in zip(y, rows, strict=True):
        color = "#1f6f3f" if c.certified else "#9a3b3b"
        lo = c.estimate if c.estimate is not None and math.isfinite(c.estimate) else 0.0
        lo = max(lo, 0.0)  # R is in [0, 1]: an estimate below 0 (a judge-corrected mean can be) is drawn from 0
        ax.plot([min(lo, c.upper_bound), c.upper_bound], [yi, yi], color=color, lw=3 if c.selected else 1.8)
        ax.plot([c.upper_bound], [yi], "|", color=color, ms=9, mew=2)
    ax.axvline(alpha, color="k", ls="--", lw=1, label=f"alpha = {alpha:g}")
    ax.set_xlim(0.0, min(1.0, 1.1 * max(alpha, *(c.upper_bound for c in rows))))  # within R's range
    ax.set_yticks(y, [c.candidate + ("  (selected)" if c.selected else "") for c in rows], fontsize=_FONT)
    ax.set_xlabel("risk R: estimate to its own test's upper bound (green: certified R <= alpha)")
    ax.set_title("each candidate's own one-sided bound (per-candidate level) against alpha")
    ax.legend(loc="lower right", fontsize=_FONT)
    return _save(fig, path)


def _recovery_bounds_plot(cert: Certificate, path: pathlib.Path) -> pathlib.Path | None:
    """A recovery or regression job's bounds: each candidate's own lower bound (a bar from its estimate) against the
    claim's threshold (r, or the baseline less the margin)."""
    claim = cert.claim
    if claim.kind == "regression":
        shift = -claim.margin if claim.superiority else claim.margin
        figs, thr = (lambda c: c.regression), -shift
        words = (f"score - score of {claim.baseline!r}", f"{claim.words}")
    else:
        figs, thr = (lambda c: c.recovery), claim.at_least
        words = (f"recovery of {claim.reference!r}", f"r = {claim.at_least:g}")
    rows = [c for c in cert.candidates if figs(c).lower_bound is not None and c.labels_human > 0]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, max(2.5, 0.22 * len(rows) + 1.2)))
    y = np.arange(len(rows))[::-1]
    for yi, c in zip(y, rows, strict=True):
        f, color = figs(c), "#1f6f3f" if c.certified else "#9a3b3b"
        hi = f.estimate if f.estimate is not None else f.lower_bound
        ax.plot([f.lower_bound, max(hi, f.lower_bound)], [yi, yi], color=color, lw=3 if c.selected else 1.8)
        ax.plot([f.lower_bound], [yi], "|", color=color, ms=9, mew=2)
    ax.axvline(thr, color="k", ls="--", lw=1, label=words[1])
    ax.set_yticks(y, [c.candidate + ("  (selected)" if c.selected else "") for c in rows], fontsize=_FONT)
    ax.set_xlabel(f"{words[0]}: its own test's lower bound to the estimate (green: certified)")
    ax.set_title("each candidate's own one-sided lower bound (per-candidate level) against the claim")
    ax.legend(loc="best", fontsize=_FONT)  # a regression's bars reach the left edge
    return _save(fig, path)


MAX_PATHS = 12  # e-value paths drawn (and named in the legend): beyond these, a legend cannot be read


def drawn_paths(paths) -> list[EvaluePath]:
    """The paths the e-value plot draws: all of them up to :data:`MAX_PATHS`, else the selected, the certified and
    then the most evident others (by their highest e-value)."""
    if len(paths) <= MAX_PATHS:
        return list(paths)
    key = [(not p.selected, not p.certified, -float(np.max(p.log_e))) for p in paths]
    keep = sorted(range(len(paths)), key=key.__getitem__)[:MAX_PATHS]
    return [paths[k] for k in sorted(keep)]


def evalue_plot(inputs: PlotInputs, path: pathlib.Path) -> pathlib.Path | None:
    """E-value paths on a log axis with each path's threshold (the strictest one drawn), every path drawn named in the
    legend, and each one's running maximum marked: the e-value the terminal and the certificate print, which the path
    itself may have fallen below by its last label."""
    if not inputs.paths:
        return None
    plt = _plt()
    drawn = drawn_paths(inputs.paths)
    fig, ax = plt.subplots(figsize=(9, 4))
    for r in drawn:
        e = np.exp(np.minimum(r.log_e, 700))
        line, = ax.plot(np.arange(1, e.size + 1), e, "-" if r.certified else ":", lw=2.5 if r.selected else 1.2,
                        label=f"{r.name} (selected)" if r.selected else r.name)
        top = int(np.argmax(r.log_e))
        ax.plot([top + 1], [e[top]], marker="v", color=line.get_color(), ms=5, ls="none")
    ax.plot([], [], marker="v", color="0.4", ls="none", label="its highest e-value (the one printed)")
    # the strictest threshold any candidate was held to (the engine's decision levels)
    ax.axhline(inputs.threshold, color="k", lw=1, label=f"threshold: {inputs.threshold_words}")
    ax.set_yscale("log")
    ax.set_xlabel("human labels")
    ax.set_ylabel("e-value (log axis)")
    more = len(inputs.paths) - len(drawn)
    ax.set_title("e-values: certified when a path reaches its threshold (solid: in the certified set)"
                 + (f"\n{len(drawn)} of {len(inputs.paths)} candidates drawn (the selected, the certified, then the "
                    f"highest); selection.json has every one" if more else ""), fontsize=_FONT + 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=_FONT, borderaxespad=0)
    return _save(fig, path)


def budget_plot(inputs: PlotInputs, path: pathlib.Path) -> pathlib.Path | None:
    """The objective of what the job would have selected with a smaller per-candidate budget."""
    if not inputs.budget_curve:
        return None
    budgets, sel = zip(*inputs.budget_curve, strict=True)  # the engine's (engine/derived.py)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.step(budgets, [np.nan if s is None else s for s in sel], where="post")
    ax.set_xlabel("human labels per candidate (budget)")
    ax.set_ylabel(inputs.objective)
    ax.set_title("objective of the selected candidate vs. budget")
    return _save(fig, path)


def ranking_plot(cert: Certificate, path: pathlib.Path) -> pathlib.Path | None:
    """A ranking's certified pairs as a matrix: row better than column, worse, or undecided."""
    rk = cert.ranking
    if rk is None:
        return None
    plt = _plt()
    from matplotlib.colors import ListedColormap

    names = rk.order
    K = len(names)
    pos = {m: k for k, m in enumerate(names)}
    grid = np.full((K, K), 1)  # 1 undecided, 2 row better, 0 row worse, 3 the diagonal
    for a, worse in rk.better.items():
        for b in worse:
            grid[pos[a], pos[b]], grid[pos[b], pos[a]] = 2, 0
    np.fill_diagonal(grid, 3)
    fig, ax = plt.subplots(figsize=(0.45 * K + 3.5, 0.45 * K + 2))
    ax.imshow(grid, cmap=ListedColormap(["#c96a6a", "#e6e6e6", "#5f9e6e", "white"]), vmin=0, vmax=3)
    short = [m if len(m) <= 28 else m[:26] + "…" for m in names]
    ax.set_xticks(range(K), short, rotation=60, ha="right", fontsize=_FONT)
    ax.set_yticks(range(K), [s + (" *" if m in rk.possible_winners else "") for s, m in
                             zip(short, names, strict=True)], fontsize=_FONT)
    ax.set_title("row vs column: green = row certified better, red = worse, grey = undecided\n"
                 "(* possible winner: no model certified better)")
    return _save(fig, path)


def write_plots(inputs: PlotInputs, outdir: pathlib.Path) -> list[pathlib.Path]:
    """Every plot the job has into ``outdir``; the files made."""
    cert, outdir = inputs.cert, pathlib.Path(outdir)
    made = [bounds_plot(inputs, outdir / "bounds.png") if cert.ranking is None else None,
            evalue_plot(inputs, outdir / "evalue_paths.png"), budget_plot(inputs, outdir / "selected_vs_budget.png"),
            ranking_plot(cert, outdir / "ranking.png")]
    return [p for p in made if p is not None]
