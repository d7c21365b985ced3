"""The driver's side of one claim, one test (workers/claims.py): a continued claim's record starts where its test
stands, and every claim's test is written to the store's ledger when the job ends."""

from __future__ import annotations

import json
import pathlib

import numpy as np

from certsel.errors import InputError
from certsel.policies.kinds import Family, Labels
from certsel.workers.claims import ClaimLedger, ClaimRun, ClaimStart, claim_key, continued_orders, pin_file

from certsel.orchestrator.results.outcomes import Outcome
from certsel.orchestrator.results.records import CandidateRecord, ContinuedClaim, Status


def claim_starts(cfg, data, identities: list, job_dir=None) -> list[ClaimStart | None]:
    """Each candidate's claim in the store's ledger (None: no identity, or the store is off; rankings have none yet).
    A claim tested before is continued: its recorded test on its consumed items, then new ones in this job's order. The
    runs continued are pinned in the job's folder (a resumed job starts where it started). Bad input
    (:class:`InputError`): a claim tested before with another policy, bet, judge ratio, observation or sampling, or by a
    policy whose test cannot be continued."""
    if cfg.state.store is None or all(i is None for i in identities):
        return [None] * len(identities)
    from certsel.config.identity import config_fingerprint

    fp = config_fingerprint(cfg, data.fingerprint)
    if cfg.proc.ranking:  # a ranking's test cannot be continued yet: one configuration per ranking claim
        _check_ranking(cfg, identities, fp)
        return [None] * len(identities)
    pins = json.loads(pin_file(job_dir).read_text()) if job_dir is not None and pin_file(job_dir).exists() else {}
    ledger = ClaimLedger(cfg.state.store)
    out = []
    try:
        for k, identity in enumerate(identities):
            if identity is None:
                out.append(None)
                continue
            key = claim_key(identity, cfg.alpha / data.unit)
            base = ledger.base(key, fp, None if pins.get(key) is None else int(pins[key]))
            if base is None:
                out.append(ClaimStart(key, fp))
                continue
            _check_same_test(cfg, base, data.names[k])
            human, judge = continued_orders(base, data.n_items, cfg.seed, cfg.budget.n, cfg.policy.without_replacement)
            out.append(ClaimStart(key, fp, base, human, judge))
    finally:
        ledger.close()
    if job_dir is not None and not pins:
        pin_file(job_dir).write_text(json.dumps({c.key: (c.base.seq if c.continued else 0) for c in out if c}))
    return out


def ranking_key(cfg, identities: list) -> str | None:
    """The claim of a ranking: the order of these models' labels (None: a model without identity)."""
    if any(i is None for i in identities):
        return None
    return claim_key("ranking:" + ",".join(sorted(identities)), float(cfg.pairwise.epsilon or 0.0))


def _check_ranking(cfg, identities: list, fp: str) -> None:
    key = ranking_key(cfg, identities)
    if key is None:
        return
    ledger = ClaimLedger(cfg.state.store)
    try:
        runs = ledger.runs(key)
    finally:
        ledger.close()
    if runs and not any(r.fingerprint == fp for r in runs):
        job = (runs[-1].state.get("jobs") or [None])[-1] or "?"
        raise InputError(f"the ranking of these models' labels was tested before (job {job}); a ranking's test cannot "
                         "be continued yet: rerun that job's configuration (it is recomputed), or rank other labels")


def continues(kind) -> bool:
    """Whether a policy kind's test can be continued by a later run (a betting test on the job's order)."""
    return kind.family is Family.TESTING and kind.labels is Labels.ORDER


def _check_same_test(cfg, base: ClaimRun, name: str) -> None:
    """A rerun continues the claim's recorded test: the settings that make the test must be the recorded ones."""
    pol = cfg.policy
    where = f"{name}: its claim (R <= {cfg.alpha:g} on these labels) was tested before (job " \
            f"{(base.state.get('jobs') or [None])[-1] or '?'}, {base.t} labels)"
    if base.state.get("kind") != pol.kind:
        raise InputError(f"{where} with policy.kind {base.state.get('kind')!r}; a rerun continues that test: set "
                         f"policy.kind: {base.state.get('kind')} (another alpha, or other labels, is another claim)")
    if not continues(pol.policy_kind):
        raise InputError(f"{where} by policy {pol.kind!r}, whose test cannot be continued; rerun that job's "
                         "configuration (it is recomputed), or test another claim")
    test = base.state["candidate"]["test"]["config"]
    now = {"policy.betting": pol.strategy.spec(), "budget.r": max(cfg.budget.r, 1) if pol.uses_judge else 1,
           "policy.observation": pol.observation,
           "policy.sampling": "without-replacement" if pol.without_replacement else "iid"}
    then = {"policy.betting": dict(test["betting"]), "budget.r": int(test["r"]), "policy.observation":
            test["observation"], "policy.sampling": "without-replacement" if "population" in test else "iid"}
    differ = [f"{k} {then[k]!r} (now {now[k]!r})" for k in now if now[k] != then[k]]
    if differ:
        raise InputError(f"{where} with {', '.join(differ)}; a rerun continues that test: set them as then")


def prime(records: list[CandidateRecord], specs) -> None:
    """The records of continued claims hold their test's evidence so far (labels consumed, the log e-value path, the
    futility evidence), so the procedure decides on the whole test and a claim already decided buys nothing."""
    for r, spec in zip(records, specs, strict=True):
        if spec.claim is None or not spec.claim.continued:
            continue
        base = spec.claim.base
        test = base.state["candidate"]["test"]
        r.t = base.t
        r.path = [float(x) for x in base.state["path"]]
        r.log_e = r.path[-1] if r.path else 0.0
        r.max_log_e = float(np.asarray(test["max_log_e"]))
        fut = base.state["candidate"].get("futility")
        r.max_log_futility = 0.0 if fut is None else float(np.asarray(fut["max_log_e"]))
        r.exhausted = base.t >= len(spec.claim.human_items)
        r.status = Status.RUNNING
        r.claim = ContinuedClaim(base.runs, base.t, np.asarray(spec.claim.human_items), dict(test["config"]),
                                 list(base.state.get("jobs", [])))


def record(plan, pool, records: list[CandidateRecord], certified: set, job_dir) -> None:
    """Each claim's test after this job, as a run of the claim in the ledger (a configuration already recorded for it
    adds nothing: it was a recomputation)."""
    job = None if job_dir is None else pathlib.Path(job_dir).name
    if plan.procedure.ranking and plan.cfg.state.store is not None:
        key = ranking_key(plan.cfg, [s.identity for s in plan.specs])
        if key is not None:
            from certsel.config.identity import config_fingerprint

            ledger = ClaimLedger(plan.cfg.state.store)
            try:
                ledger.record(key, config_fingerprint(plan.cfg, plan.data.fingerprint), job, 0,
                              sum(r.n_human for r in records), "ranked", {"kind": "ranking", "runs": 1, "jobs": [job]})
            finally:
                ledger.close()
        return
    with_claim = {s.name: s.claim for s in plan.specs if s.claim is not None}
    if not with_claim:
        return
    ran = [r for r in records if r.name in with_claim and r.t > 0]
    states = pool.claim_states([r.name for r in ran]) if ran else {}
    ledger = ClaimLedger(plan.cfg.state.store)
    try:
        for r in ran:
            claim = with_claim[r.name]
            if continues(plan.cfg.policy.policy_kind) and r.name not in states:
                continue  # no test state to continue from (its source failed before any label)
            before = claim.base.state if claim.continued else {}
            state = {**states.get(r.name, {}), "path": np.asarray(r.path, dtype=np.float64), "kind": plan.cfg.policy.kind,
                     "runs": int(before.get("runs", 0)) + 1, "jobs": [*before.get("jobs", []), job]}
            ledger.record(claim.key, claim.fingerprint, job, claim.base.seq if claim.continued else 0, r.t,
                          str(Outcome.of(r.status, r.name in certified)), state)
    finally:
        ledger.close()
