"""The GPU time of a job's own model servers (``selection.json``'s ``gpu`` block, the terminal, MLflow).

Measured (:mod:`certsel.workers.gpu_time`): per server its starts and seconds waiting for placement, loading, busy
and idle, times its GPUs; per candidate the GPU-seconds of its generations (busy time shared among the candidates in
flight). Estimated: the GPU time of every candidate at its whole budget at this job's rates
(:func:`_full_budget_estimate`), a projection that a cached rerun (nothing measured) does not have.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .selection_schema import Gpu


def _r(x: float) -> float:
    return round(float(x), 3)


def gpu_block(result) -> dict | None:
    """``selection.json``'s ``gpu`` block (None for a job with no servers of its own)."""
    use = result.gpu
    if use is None:
        return None
    servers = [s.as_dict() for s in use.servers]
    busy_gpu_s = sum(s.busy_s * s.gpus for s in use.servers)
    full = _full_budget_estimate(result, use)
    spent = use.gpu_s
    out = {
        "gpu_seconds": _r(spent),
        "gpu_hours": round(spent / 3600, 6),
        "busy_gpu_seconds": _r(busy_gpu_s),
        "load_gpu_seconds": _r(sum(s.load_s * s.gpus for s in use.servers)),
        "idle_gpu_seconds": _r(sum(s.idle_s * s.gpus for s in use.servers)),
        "server_seconds": _r(sum(s.up_s for s in use.servers)),  # whatever they hold (CPU-only servers too)
        "server_starts": use.starts,
        "max_servers_up": use.max_up,
        "max_gpus_up": use.max_gpus_up,
        "full_budget_estimate_gpu_seconds": None if full is None else _r(full),
        "saved_fraction_estimate": None if not full else round(1 - spent / full, 4),
        "servers": [{k: (_r(v) if isinstance(v, float) else v) for k, v in s.items()} for s in servers],
        "candidates": {k: _r(v) for k, v in sorted(use.candidate_gpu_s.items())},
        "shared": {k: _r(v) for k, v in sorted(use.job_gpu_s.items())},
    }
    prices = result.cfg.costs
    if prices is not None and prices.gpu_hour:
        out["cost"] = {"unit": prices.unit, "gpu_hour": prices.gpu_hour, "spent": round(spent / 3600 * prices.gpu_hour, 6),
                       "full_budget_estimate": None if full is None else round(full / 3600 * prices.gpu_hour, 6)}
    return out


def _full_budget_estimate(result, use) -> float | None:
    """GPU-seconds for every candidate at its whole budget at this job's rates: the GPU time that grew with the
    labels (servers' time up, less loads and the shared work before the rounds) per label bought, times the full
    budget's labels, plus the shared work and one mean load per server. Idle time is in the per-label rate (a full
    run is assumed as idle per label). None when nothing was measured (a cached rerun)."""
    bought = result.spent["human"] + result.spent["judge"]
    starts = [s for s in use.servers if s.starts]
    if not bought or not starts:
        return None
    shared = sum(use.job_gpu_s.values())
    loads = sum(s.load_s * s.gpus for s in use.servers)
    per_label = max(use.gpu_s - loads - shared, 0.0) / bought
    load_per_start = sum(s.load_s * s.gpus for s in starts) / sum(s.starts for s in starts)
    return per_label * (result.full["human"] + result.full["judge"]) + shared + load_per_start * len(use.servers)


def gpu_line(block: Gpu) -> str:
    """One terminal line: the GPU time used, its parts, and the full-budget estimate."""
    def h(sec):
        return f"{sec / 3600:.3g} GPU-h" if sec >= 360 else f"{sec:.0f} GPU-s"

    if not block.server_starts:  # a cached rerun: nothing to measure
        return "servers: none started (every request was answered from the response cache)"
    if not any(s.gpus for s in block.servers):  # servers that hold no GPU (the CPU build)
        parts = [sum(getattr(s, k) for s in block.servers) for k in ("load_s", "busy_s", "idle_s")]
        return (f"servers: no GPUs; up {block.server_seconds:.0f} s in all ({parts[0]:.0f} s loading, "
                f"{parts[1]:.0f} s generating, {parts[2]:.0f} s idle; {block.server_starts} starts, at most "
                f"{block.max_servers_up} up at once)")
    line = (f"GPU: {h(block.gpu_seconds)} ({h(block.load_gpu_seconds)} loading, "
            f"{h(block.busy_gpu_seconds)} generating, {h(block.idle_gpu_seconds)} idle; "
            f"{block.server_starts} server starts, at most {block.max_servers_up} up at once)")
    if block.full_budget_estimate_gpu_seconds is not None:
        line += (f", against about {h(block.full_budget_estimate_gpu_seconds)} for every candidate to its budget "
                 f"at the measured rates ({block.saved_fraction_estimate:.0%} saved)")
    if block.cost is not None:
        line += f"; {block.cost.spent:.4g} {block.cost.unit} at {block.cost.gpu_hour:g} per GPU-hour"
    return line


def gpu_metrics(block: Gpu | None) -> dict:
    """The parent run's MLflow metrics."""
    if block is None:
        return {}
    keys = ("gpu_seconds", "busy_gpu_seconds", "load_gpu_seconds", "idle_gpu_seconds", "server_starts",
            "max_servers_up", "full_budget_estimate_gpu_seconds", "saved_fraction_estimate")
    out = {(k if k.startswith("gpu") else f"gpu_{k}"): getattr(block, k) for k in keys if getattr(block, k) is not None}
    if block.cost is not None:
        out["cost_gpu"] = block.cost.spent
    return out
