"""The certificate (``selection.json``): what was chosen, on what evidence, at what cost.

Every number is stated at the level it has (docs/driver.md, "The certificate (`selection.json`) and the report"):
``simultaneous_bound`` holds for every candidate's R *together* with probability >= 1 - delta and is <= alpha exactly
for the certified set (:meth:`~certsel.policies.procedures.Procedure.joint_bounds`); the certificate quotes the selected
candidate's because it keeps its level whatever made that candidate the selected one. ``upper_bound`` inverts the
candidate's own test at ``level``, the level of its decision (<= alpha exactly when it passed): a per-candidate
statement, not adjusted for the selection. ``e_value`` comes with its ``threshold``; the ``estimate``, a mean of
observations each unbiased given the past, is unbiased at a fixed number of labels, not at a stop that depends on the
evidence. Upper bounds are rounded up and lower bounds down, so a printed number never claims more than the computed
one. ``guarantee`` says in words what R is and why the statement holds.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math


from certsel._version import __version__

from .gpu import gpu_block
from .selection_schema import SCHEMA_VERSION, Certificate, parse

from certsel.orchestrator.results.records import JobResult
from certsel.orchestrator.inputs.sources import source_of

from .numbers import _round, round_down, round_up
from .goals import goal_for, goal_for_config


def recovery_claim_words(cfg) -> str:
    """The claim a recovery job certifies, in words: "recovery >= 95% of 'score_fp_human'"."""
    return goal_for_config(cfg).claim_words_of(cfg)


def _guarantee(result: JobResult) -> str:
    """What R is and why the certificate holds, in words."""
    cfg, n_items = result.cfg, result.data.n_items
    goal = goal_for(result)
    loss = goal.loss_words(cfg)
    kind = cfg.policy.policy_kind
    stacked = goal.subject(result, loss)
    if kind.guarantee is not None or not kind.worded:  # a kind registered by the user
        why = kind.guarantee or f"The statement holds by the argument of policy kind {kind.name!r} (its documentation)."
        first = stacked or f"R is a candidate's mean {loss} over the {n_items} items of the test set."
        return f"{first} {why}"
    if cfg.policy.is_testing and cfg.policy.judge_first:
        first = stacked or f"R is a candidate's mean {loss} over the {n_items} items of the test set (a finite population)."
        return (f"{first} The "
                "judge scored every item first; human labels were drawn without replacement by strata of the "
                "judge's loss, and each candidate's e-process bets on an observation whose conditional mean is R "
                "exactly, for any strata, allocation and controls fixed from past labels, so the statement holds "
                "at any stopping time by Ville's inequality. A bad judge costs labels, never validity.")
    if cfg.policy.is_testing and cfg.policy.without_replacement:
        source = source_of(cfg).items_words(n_items)
        first = stacked or (f"R is a candidate's mean {loss} over {source}: a finite population, which the job labels "
                            "in a random order without replacement (the judge-only items in an order of their own).")
        return (f"{first} Each candidate's e-process bets on finite-population observations whose conditional "
                "mean is R exactly, so it is a test supermartingale under R > alpha and the statement holds at any "
                "stopping time by Ville's inequality. A bad judge costs labels, never validity.")
    if cfg.policy.is_testing:
        source = source_of(cfg).items_words(n_items)
        first = stacked or (f"R is a candidate's risk: its expected {loss} on an item drawn from the distribution that "
                            f"{source} were sampled from, labelled in a random order.")
        return (f"{first} Assumption: the items are an i.i.d. sample of that distribution (a random order of such a "
                "sample is itself one). Under it each candidate's e-process is a test supermartingale under R > alpha, "
                "so the statement holds at any stopping time by Ville's inequality. For the mean over these items "
                "themselves, with no assumption, policy.sampling: without-replacement makes the statement exact. A bad "
                "judge costs labels, never validity.")
    what = (f"R is a candidate's mean {loss} over the {n_items} items of the test set (a finite population: with "
            "every item labelled the interval is R itself). Its intervals and decisions are ")
    if cfg.policy.radius == "paper":
        return what + ("the Cer-Eval paper's closed-form radii (radius: paper), per group with a union bound "
                       "over groups: exact for Seq and for a partition fixed before labelling, not for a partition "
                       "fitted to the labels (the 1-NN partition of Algorithm 2).")
    groups = (f"groups from {cfg.policy.partition} refitted from past labels"
              if "partition" in cfg.policy.policy_kind.takes else "one group")
    return what + (f"one betting confidence sequence on stratified draws without replacement ({groups}): "
                   "anytime-valid for any partition, refit schedule, batch order and stopping rule, with no split "
                   "of delta over groups or refits.")


def certificate(result: JobResult) -> Certificate:
    """The certificate, checked against the published schema (``as_json()`` is selection.json)."""
    return parse(_fields(result))


def _fields(result: JobResult) -> dict:
    """The certificate's fields, as :class:`Certificate` takes them: the statement, then one block per part."""
    cfg, sel, goal = result.cfg, result.selected_record, goal_for(result)
    extra = goal.candidate_fields(result)
    rows = [{**_candidate_row(result, r), "reason": goal.reason(cfg, r.reason), **extra[r.index]}
            for r in result.records]
    if cfg.costs is not None:
        for r, row in zip(result.records, rows, strict=True):
            row["cost"] = _round(cfg.costs.of(r.n_human, r.n_judge, r.requests)["total"], 6)
    out = {
        "schema_version": SCHEMA_VERSION,
        "certsel_version": __version__,
        "job": cfg.name,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "selected": result.selected,
        "selected_objective": None if sel is None else sel.objective,
        "certificate": goal.statement(result),
        **goal.top_fields(result),
        "guarantee": _guarantee(result),
        "evidence": _evidence(result, rows[sel.index], goal) if sel is not None and goal.has_evidence else None,
        "certified_set": list(result.certified),
        "procedure": {"name": cfg.procedure, "delta": cfg.delta, "level": result.level,
                      "candidates": len(result.records), **goal.procedure_fields(cfg)},
        "policy": _policy(cfg),
        "objective": None if cfg.objective is None else cfg.objective.model_dump(),
        "labels": _labels(result),
        "costs": None if cfg.costs is None else _costs(cfg, result),
        "gpu": gpu_block(result),
        "scheduling": cfg.scheduling.stated(),
        "data": {"path": cfg.data_path, "sha256_16": result.data.fingerprint, "items": result.data.n_items,
                 **({"judge": cfg.judge_name} if _uses_judge(cfg) else {})},
        "seed": cfg.seed,
        "job_id": result.job_id,
        "resume": None if result.resume is None else dataclasses.asdict(result.resume),
        "recovered": None if result.recovered is None else dataclasses.asdict(result.recovered),
        "seconds": _round(result.seconds, 3),
        "candidates": _sorted_rows(cfg, rows, goal.by_objective(cfg)),
    }
    if result.data.pilot is not None:
        out["pilot"] = _pilot(result.data.pilot)
    out["ledger"] = ledger_block(cfg, result.data)
    return out


def ledger_block(cfg, data) -> dict:
    """Where each claim's test is kept (:mod:`certsel.config.ledger`): a rerun continues it, or (off, or a source
    without label identity) is a new test."""
    from certsel.config.ledger import OFF_LINE

    if cfg.state.store is None:
        return {"store": None, "statement": OFF_LINE.removeprefix("ledger: ")}
    kind = source_of(cfg)
    if not cfg.proc.ranking and all(kind.claim_identity(cfg, data, k) is None for k in range(len(data.names))):
        return {"store": None, "statement": f"the {kind.name} source has no label identity, so no claim is "
                                            "kept: this statement holds for this run alone, and a rerun is a new test "
                                            "(docs/gate.md, 'Reruns')"}
    return {"store": str(cfg.state.store),
            "statement": "each claim's test is kept in this store's ledger: a rerun of a claim, through any front "
                         "end, continues its one test, so its statement holds at delta however often it is rerun"}


def _candidate_row(result: JobResult, r) -> dict:
    """One candidate's row: its numbers rounded outward, the parts that apply to it (others absent)."""
    cfg, level = result.cfg, float(result.levels[r.index])  # the level its decision was taken at
    row = {
        "candidate": r.name, "objective": r.objective, "status": r.status, "reason": r.reason,
        "certified": r.name in result.certified, "selected": r.name == result.selected,
        "labels_human": r.n_human, "labels_judge": r.n_judge, "requests": r.requests,
        "estimate": _round(r.estimate), "upper_bound": round_up(r.upper_bound, cap=cfg.alpha),
        "simultaneous_bound": round_up(r.joint_bound, cap=cfg.alpha),
        "ci": None if r.ci is None else [round_down(r.ci[0]), round_up(r.ci[1])],
        "certified_at_labels": r.certified_at or None,
        "labels_minimum_estimate": None if r.label_minimum is None else round(r.label_minimum, 1),
        "risk_on_full_table": _round(r.true_risk), "level": _round(level, 8),
    }
    if r.path:  # e-values: the threshold is 1 / level
        row.update(e_value=_round(math.exp(min(r.max_log_e, 700)), 4), log_e_value=_round(r.max_log_e),
                   e_value_now=_round(math.exp(min(r.log_e, 700)), 4),
                   threshold=_round(1.0 / level, 4))
    if cfg.state.store is not None:  # labels kept across jobs: how many of its labels were reused
        row["reused"] = r.reused
    if r.claim is not None:  # its claim's test, continued from earlier runs
        row["continued"] = {"runs": r.claim.runs, "labels": r.claim.before, "jobs": list(r.claim.jobs)}
    if r.exact:  # the e-value is kept for the record; the exact mean decided
        row["exact"] = True
    if r.rho_weights is not None and len(r.rho_weights) > 1:
        row["rho_weights"] = [_round(w, 4) for w in r.rho_weights]
    if r.judge is not None:
        row["judge"] = {k: (_round(v, 4) if isinstance(v, float) else v) for k, v in r.judge.items()}
    if r.queue is not None:
        row["annotators"] = dataclasses.asdict(r.queue)
    return row


_EVIDENCE_KEYS = ("simultaneous_bound", "e_value", "e_value_now", "threshold", "log_e_value", "upper_bound", "level", "ci",
                  "estimate", "certified_at_labels", "labels_minimum_estimate", "labels_human", "labels_judge")


def _evidence(result: JobResult, row: dict, goal) -> dict:
    """The selected candidate's own numbers, from its row, with the levels they hold at."""
    cfg = result.cfg
    evidence = {k: row.get(k) for k in _EVIDENCE_KEYS}
    if row.get("exact"):
        evidence["exact"] = True
    evidence["simultaneous_confidence"] = 1 - cfg.delta
    evidence["estimate_note"] = ("the mean of per-label observations each unbiased given the past: unbiased at a "
                                 "fixed number of labels, not at this data-dependent stop"
                                 + ("; the judge's correction can take it below 0" if cfg.policy.uses_judge else "")
                                 if cfg.policy.is_testing else "the midpoint of the two-sided interval")
    evidence["ci_level"] = 1 - result.ci_delta
    evidence.update(goal.evidence_fields(result, result.selected_record.index))
    return evidence


def _policy(cfg) -> dict:
    return {"kind": cfg.policy.kind, "betting": cfg.policy.strategy.describe(), "radius": cfg.policy.radius,
            "partition": cfg.policy.partition,
            **({"sampling": cfg.policy.sampling} if cfg.policy.without_replacement else {})}


def _labels(result: JobResult) -> dict:
    """Labels spent against the full budget, the budget, the rounds, and the oracle's estimate."""
    saved = {k: (1 - result.spent[k] / result.full[k]) if result.full[k] else 0.0 for k in result.spent}
    return {"spent": result.spent, "full_budget": result.full, "saved_fraction": {k: _round(v, 4) for k, v in saved.items()},
            "budget": _budget(result.cfg), "rounds": result.rounds,
            **({} if result.oracle is None else {"oracle": _oracle(result.oracle)})}


_ORACLE_NOTES = {
    "ranking": ("an oracle that knew each pair's mean difference and spread would settle each model's pairs the "
                "cheapest way (the pair itself, ordered or tied, or an order implied through a model strictly between "
                "the two; a tie is never implied), with the normal bound for sampling without replacement at the "
                "pair's level, a model labelled as far as its costliest such decision, moments estimated from the "
                "job's labels: a plug-in estimate, not a bound"),
    "certified": ("an oracle that knew every risk would test only the certified candidates, each with the fewest labels "
                  "any level test needs on average (log(1/level) / KL_inf, or the prediction-powered floor with a "
                  "judge), estimated from their own labels: a plug-in estimate, not a bound; under a fixed sequence "
                  "also the fewest labels any procedure needs to end the first candidate it cannot certify (stop)"),
}


def _oracle(o) -> dict:
    """Labels used against the oracle's estimate (engine/derived.py), rounded for the file."""
    return {"labels": o.labels, "oracle_estimate": _round(o.oracle, 1), "ratio": _round(o.ratio, 3),
            "candidates": o.candidates, "basis": o.basis, "note": _ORACLE_NOTES[o.basis],
            **({} if o.stopped is None else {"stop": {"candidate": o.stopped, "labels": _round(o.stop, 1)}})}


def _pilot(p) -> dict:
    """Where the fixed sequence started, and why the configs before it have no statement."""
    checked = (f"; people checked the start on {p.human_labels // len(p.checked)} human labels of those items "
               f"({len(p.checked)} config(s) checked, the start moved toward the top while above alpha)"
               if p.checked else "")
    return {"start": p.start, "skipped": list(p.skipped), "items": p.items, "margin": p.margin,
            "estimates": {k: _round(v) for k, v in p.estimates.items()}, "judge_labels": p.judge_labels,
            **({"checked": {k: _round(v) for k, v in p.checked.items()}, "human_labels": p.human_labels}
               if p.checked else {}),
            **({"pinned_by": p.pinned_by} if p.pinned_by else {}),
            "note": _pilot_note(p, checked)}


def _pilot_note(p, checked: str) -> str:
    if p.pinned_by:  # a rerun: its claims' family is the first selection's (engine/pilot.recorded_start)
        return (f"the sequence ran from {p.start}, where the first selection of its claims started (job "
                f"{p.pinned_by}), so that it is the family they were tested in; this run's judge-only pilot, on "
                f"{p.items} items of its own random draws{checked}, would have started at {p.piloted}. The "
                f"{len(p.skipped)} config(s) before {p.start} were not tested and the certificate says nothing about "
                "them. That start depended only on its pilot's draws, independent of the tests' own, so the sequence "
                "was fixed before its tests and fixed-sequence testing keeps its level")
    return (f"the sequence ran from {p.start}, {p.margin} config(s) before the frontier a judge-only pilot "
            f"estimated on {p.items} items of its own random draws{checked}; the {len(p.skipped)} config(s) "
            "before it were not tested and the certificate says nothing about them. The start depends only "
            "on the pilot's draws, independent of the tests' own, so the sequence is fixed before its tests "
            "and fixed-sequence testing keeps its level")


def certificate_of(result: JobResult) -> Certificate:
    """The job's certificate, built once and kept on the result: every output of one job (selection.json, MLflow, the
    terminal, the Python API) shows the same one."""
    if result.certificate is None:
        result.certificate = certificate(result)
    return result.certificate


def _costs(cfg, result: JobResult) -> dict:
    """The job's spend in the user's unit (``costs:``), by kind and in total, for what it bought and at full budget."""
    c = cfg.costs
    spent = {k: _round(v, 6) for k, v in c.of(result.spent["human"], result.spent["judge"],
                                                result.spent["requests"]).items()}
    full = {k: _round(v, 6) for k, v in c.of(result.full["human"], result.full["judge"], result.full["requests"]).items()}
    return {"unit": c.unit, "prices": {"human": c.human, "generation": c.generation, "judge": c.judge,
                                       "gpu_hour": c.gpu_hour},
            "spent": spent, "full_budget": full}


def _uses_judge(cfg) -> bool:
    return cfg.policy.uses_judge or cfg.policy.judge_first


def _budget(cfg) -> dict:
    """The budget keys that mean something for this job (no judge ratio without a judge)."""
    b = cfg.budget.model_dump()
    if not cfg.policy.uses_judge:
        b.pop("r")
    return b


def _sorted_rows(cfg, rows: list, by_objective: bool) -> list:
    """Candidates in the job's order, or by objective (best first) when ``by_objective``; each keeps its ``position``."""
    for k, row in enumerate(rows):
        row["position"] = k
    if not by_objective or any(r["objective"] is None for r in rows):
        return rows
    sign = -1.0 if cfg.objective.goal == "maximize" else 1.0
    return sorted(rows, key=lambda r: (sign * r["objective"], r["position"]))
