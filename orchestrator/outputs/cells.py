"""Table cells of a certificate (the typed :class:`~.selection_schema.Certificate`), shared by the terminal, the report
and ``certsel show``: pure formatting with no heavy imports, so that showing a past job's certificate starts at once."""

from __future__ import annotations

from certsel.orchestrator.results.outcomes import budget_stopped


def efficiency_cell(row) -> str:
    """A certified candidate's labels to certify against the fewest any test would need: "174 / 60" (else blank)."""
    if not row.certified or not row.certified_at_labels or row.labels_minimum_estimate is None:
        return ""
    return f"{row.certified_at_labels} / {row.labels_minimum_estimate:.0f}"


def oracle_line(oracle) -> str:
    """The job's human labels against ``labels.oracle``: "labels used / oracle estimate: 1,457 / 612 = 2.38x (...)"."""
    if oracle is None:
        return ""
    n = oracle.candidates
    why = ("what an oracle that knew each pair's mean difference and spread would evaluate for a full ranking of the "
           f"{n} models, estimated from their labels" if oracle.basis == "ranking" else
           f"an oracle that knew every risk would label only the {n} certified candidate{'s' if n != 1 else ''}, each "
           "with the fewest labels any test needs" + ("" if oracle.stop is None else
                                                      f", and {oracle.stop.candidate} with the {oracle.stop.labels:,.0f} "
                                                      "any procedure needs to end it uncertified") +
           ", estimated from their labels")
    return (f"labels used / oracle estimate: {oracle.labels:,} / {oracle.oracle_estimate:,.0f} = {oracle.ratio:.2f}x "
            f"({why})")


def judge_cell(judge) -> str:
    """A candidate's judge agreement for tables: "97% (0.85)" (agreement, Cohen's kappa)."""
    if judge is None:
        return ""
    return f"{judge.agreement:.0%}" + ("" if judge.kappa is None else f" ({judge.kappa:.2f})")


def tasks_cell(people) -> str:
    """A candidate's annotation queue: "24 / 2 (2 saved)" (tasks imported / withdrawn, annotations saved)."""
    if people is None:
        return ""
    return f"{people.tasks_imported} / {people.tasks_withdrawn} ({people.annotations_saved} saved)"


def agreement_cell(people) -> str:
    """The annotators' agreement for tables: "0.81 (0.79)" (Krippendorff's alpha, mean kappa)."""
    agree = None if people is None else people.agreement
    if not agree:
        return ""
    kappa = agree.get("cohen_kappa")
    return f"{agree['krippendorff_alpha']:.2f}" + ("" if kappa is None else f" ({kappa:.2f})")


def rank_text(rk, m: str) -> str:
    """A model's certified rank interval: "3" or "2-5" (blank for an older certificate)."""
    lo, hi = rk.rank_intervals.get(m, (None, None))
    return "" if lo is None else (str(lo) if lo == hi else f"{lo}-{hi}")


def tie_counts(rk) -> dict:
    """How many models each model is certified tied with."""
    out = {m: 0 for m in rk.order}
    for pair in rk.tied:
        a, b = pair.split(" ~ ", 1)
        out[a] += 1
        out[b] += 1
    return out


def headline(cert, objective: bool = True) -> str:
    """What the job certified, first: ``top-3: A, B, C`` for a top-k ranking (with its open places), else ``selected:
    NAME (OBJECTIVE VALUE)`` (``none`` when nothing was; ``objective=False``: the name alone)."""
    topk = None if cert.ranking is None else cert.ranking.topk
    if topk is not None:
        inside, open_ = topk.certified_in, topk.undetermined
        if len(inside) == topk.k:
            return f"top-{topk.k}: {', '.join(inside)}"
        known = ", ".join(inside) if inside else "none certified"
        return (f"top-{topk.k}: {known}; {topk.k - len(inside)} place(s) open among "
                f"{', '.join(open_) or 'none'}")
    return selected_headline(cert, objective)


def selected_headline(cert, objective: bool = True) -> str:
    """``selected: NAME (OBJECTIVE VALUE)`` (``none`` when nothing was; ``objective=False``: the name alone)."""
    sel = next((c for c in cert.candidates if c.selected), None)
    if sel is None or cert.objective is None or sel.objective is None or not objective:
        return f"selected: {cert.selected or 'none'}"
    return f"selected: {cert.selected} ({cert.objective.column} {sel.objective:g})"


def objective_head(cert) -> str:
    """The objective column's head: the job's objective column and its direction."""
    o = cert.objective
    return "objective" if o is None else f"{o.column} ({'min' if o.goal == 'minimize' else 'max'})"


# One name per quantity (docs/glossary.md): the words in the terminal and the report; the key in selection.json's
# candidate rows, CSV and `Result.to_frame()`; the metric on the candidate's MLflow run (None: not logged there).
# tests/test_glossary.py checks the outputs and the docs table against this list.
GLOSSARY = (
    # (words, selection.json / CSV key, MLflow metric, meaning)
    ("simultaneous bound", "simultaneous_bound", "final_simultaneous_bound",
     "R is at most this for every candidate at once, with probability >= 1 - delta: what the certificate states"),
    ("upper bound", "upper_bound", "final_upper_bound",
     "the one-sided bound of the candidate's own test at its level; not adjusted for the selection"),
    ("level", "level", "level", "the level the candidate's own test decided at (delta, delta/K, ... by procedure)"),
    ("max e-value", "e_value", "final_max_log_evalue",
     "the largest e-value of the candidate's test, its running maximum (MLflow: its natural log); certified once "
     "it reaches the threshold 1/level"),
    ("estimate", "estimate", "estimate",
     "the mean of the per-label observations (unbiased at a fixed number of labels, not at a data-dependent stop)"),
    ("two-sided interval", "ci", "final_ci_low",
     "an interval at the candidate's interval level, split over both sides (CSV, to_frame() and MLflow: its "
     "ends as ci_low, ci_high)"),
    ("human", "labels_human", "labels_human", "the human labels the candidate bought"),
    ("to certify / min", "certified_at_labels", None,
     "human labels until certified / the fewest any test would need on average (labels_minimum_estimate), "
     "estimated from its own labels"),
)


def e_value_cell(c) -> str:
    """A candidate's e-value (its running maximum) / threshold; "exact mean" where the exact mean of every item decided, not its e-value."""
    if c.e_value is None:
        return ""
    return "exact mean" if c.exact else f"{c.e_value:.3g} / {c.threshold:.3g}"


def e_value_line(ev) -> str:
    """The evidence block's e-value line."""
    if ev.exact:
        return f"  decided on the exact mean of every item (e-value {ev.e_value:.3g}, threshold {ev.threshold:.3g}, not used)"
    now = ("" if ev.e_value_now is None or ev.e_value_now >= ev.e_value
           else f"; {ev.e_value_now:.3g} after its last label")
    return f"  e-value: {ev.e_value:.3g} at its highest (threshold {ev.threshold:.3g}{now})"


def saved_text(fraction: float) -> str:
    """A saving in words; a ranking whose pairs drew different items can exceed its nominal budget."""
    return f"{fraction:.0%} saved" if fraction >= 0 else f"{-fraction:.0%} over: pairs drew different items"


def cost_line(costs) -> str:
    """The spend in the user's unit: "cost: 1,432.5 USD (human 1,400, generation 12.5, judge 20) of 7,800 at full budget"."""
    s, u = costs.spent, costs.unit
    parts = ", ".join(f"{k} {getattr(s, k):,.4g}" for k in ("human", "generation", "judge") if getattr(s, k))
    return f"cost: {s.total:,.6g} {u}" + (f" ({parts})" if parts else "") + \
        f" of {costs.full_budget.total:,.6g} {u} at full budget"


def ledger_lines(cert) -> list[str]:
    """A run without the ledger says that its statement holds for it alone (certsel.config.ledger)."""
    if cert.ledger is None or cert.ledger.store is not None:
        return []
    return [f"ledger: {cert.ledger.statement}"]


def budget_cap_lines(cert) -> list[str]:
    """A candidate left undecided by its budget while its table has more items: the budget was the limit, so the
    answer says so, with the ``--set budget.n=`` that gives it every item and what its own labels say a decision would
    take."""
    data = getattr(cert, "data", None)
    budget, items = cert.labels.budget.get("n"), None if data is None else data.items
    if items is None:
        return []
    if not budget or int(budget) >= items or cert.procedure.name == "pairwise":
        return []
    capped = [c for c in cert.candidates if c.status == "not certified"]
    out = []
    for c in capped:
        need = c.labels_minimum_estimate
        guide = "" if need is None else f"; its own labels suggest about {need:,.0f} would decide it"
        out.append(f"budget: {c.candidate} ended undecided at budget.n = {int(budget):,} (the table has {items:,} "
                   f"items): --set budget.n={items} gives it every item{guide}; a rerun continues its test "
                   f"(certsel plan --set budget.n={items} forecasts it)")
    return out


def setting_lines(cert) -> list[str]:
    """Where a measured default may not have been the best for this job: what the other setting would likely have
    changed, with the ``--set`` that gives it (docs/results.md, "Defaults against the old settings")."""
    lines = []
    futile = [c for c in cert.candidates if c.status == "futile"]
    budget = cert.labels.budget.get("n")
    if futile and budget:
        rest = sum(max(int(budget) - c.labels_human, 0) for c in futile)
        level = cert.scheduling.get("futility")
        lines.append(f"futility: {len(futile)} candidate(s) stopped once R >= alpha was certified at {level:g}, "
                     f"{rest} human labels short of their budget; --set scheduling.futility=null would have spent "
                     f"them (each such stop is wrong with probability <= {level:g})")
    stopped = [c for c in cert.candidates if budget_stopped(c.status, c.reason)]
    if stopped and budget:
        rest = sum(max(int(budget) - c.labels_human, 0) for c in stopped)
        level = cert.scheduling.get("budget_stop")
        # a gate with futility waits for either side (Rules.decides_futility); a selection for its own test alone
        verb, verbs = (("decide", "decides") if cert.gate is not None and cert.scheduling.get("futility") is not None
                       else ("certify", "certifies"))
        lines.append(f"budget stop: {len(stopped)} candidate(s) stopped, not certified, once the rest of their budget "
                     f"was unlikely to {verb} them, {rest} human labels short of it; --set scheduling.budget_stop=null "
                     f"would have spent them (a candidate the full budget {verbs} is stopped with probability <= "
                     f"{level:g})")
    lines += budget_cap_lines(cert)
    pilot = cert.pilot
    if pilot is not None and not cert.certified_set:
        lines.append(f"pilot start: the sequence started at {pilot.start} and certified nothing. That is no evidence "
                     f"against the {len(pilot.skipped)} config(s) before it, which were not tested: the judge's pilot "
                     "may have placed the start past the frontier (a weak judge does). --set scheduling.start=top "
                     "tests the sequence from its first config")
    return lines
