"""Table cells of a certificate (a ``selection.json`` dict), shared by the terminal, the
report and ``certsel show``: pure formatting with no heavy imports, so that printing a past
job's certificate starts at once."""

from __future__ import annotations


def efficiency_cell(row: dict) -> str:
    """A certified candidate's labels to certify against the fewest any test would need on
    its labels' distribution: "174 / 60" (blank when not certified or no estimate)."""
    if not row.get("certified") or not row.get("certified_at_labels") or row.get("labels_minimum_estimate") is None:
        return ""
    return f"{row['certified_at_labels']} / {row['labels_minimum_estimate']:.0f}"


def judge_cell(judge: dict | None) -> str:
    """A candidate's judge agreement for tables: "97% (0.85)" (agreement, Cohen's kappa)."""
    if not judge:
        return ""
    return f"{judge['agreement']:.0%}" + ("" if judge["kappa"] is None else f" ({judge['kappa']:.2f})")


def rank_text(rk: dict, m: str) -> str:
    """A model's certified rank interval: "3" or "2-5" (blank for an older certificate)."""
    lo, hi = rk.get("rank_intervals", {}).get(m, (None, None))
    return "" if lo is None else (str(lo) if lo == hi else f"{lo}-{hi}")


def tie_counts(rk: dict) -> dict:
    """How many models each model is certified tied with."""
    out = {m: 0 for m in rk["order"]}
    for pair in rk.get("tied", ()):
        a, b = pair.split(" ~ ", 1)
        out[a] += 1
        out[b] += 1
    return out


def headline(cert: dict) -> str:
    """What the job certified, first: ``top-3: A, B, C`` for a top-k ranking (with the
    undetermined places when the top set is not fully certified), else ``selected: NAME``
    (``none`` when nothing was)."""
    topk = (cert.get("ranking") or {}).get("topk")
    if topk:
        inside, open_ = topk["certified_in"], topk["undetermined"]
        if len(inside) == topk["k"]:
            return f"top-{topk['k']}: {', '.join(inside)}"
        known = ", ".join(inside) if inside else "none certified"
        return (f"top-{topk['k']}: {known}; {topk['k'] - len(inside)} place(s) open among "
                f"{', '.join(open_) or 'none'}")
    return f"selected: {cert['selected'] or 'none'}"
