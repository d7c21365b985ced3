"""The driver's side of one claim, one test (workers/claims.py): where each candidate's claim stands when a job starts
(a continued claim's record starts where its test stands), the job's hold on its claims while it runs, and each claim's
test written to the store's ledger when the job ends."""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib

import numpy as np

from certsel.errors import InputError
from certsel.policies.kinds import Family, Labels
from certsel.workers.claims import DROPPED, INTERRUPTED, RUNNING, ClaimBusy, ClaimLedger, claim_key, continued_orders, pin_file
from certsel.workers.claims import Family as ClaimFamily
from certsel.workers.contracts import ClaimRun, ClaimStart
from certsel.workers.label_store import identity_key
from certsel.workers.replay import label_orders

from certsel.orchestrator.inputs.sources import source_of
from certsel.orchestrator.results.outcomes import Outcome
from certsel.orchestrator.results.records import CandidateRecord, ContinuedClaim, Status

log = logging.getLogger(__name__)


def claim_identities(cfg, data) -> list[str | None]:
    """Each candidate's claim identity (None: the store is off, or its source has no identity): what decides its human
    losses, without the judge's (any judge keeps a test valid, so another judge column is the same claim)."""
    if cfg.state.store is None:
        return [None] * len(data.names)
    kind = source_of(cfg)
    out = []
    for k in range(len(data.names)):
        identity = kind.claim_identity(cfg, data, k)
        out.append(None if identity is None else identity_key({**identity, "unit": data.unit}))
    return out


def claim_words(cfg) -> str:
    """A candidate's claim in the user's units, for the lines that name it (a recovery's level, a regression's margin;
    not the risk test's alpha they become)."""
    if cfg.recovery is not None:
        return f"recovery >= {cfg.recovery.at_least:g} on these labels"
    if cfg.regression is not None:
        reg = cfg.regression
        return f"{reg.claim.words(reg.baseline)} on these labels"
    return f"R <= {cfg.alpha:g} on these labels"


ELSEWHERE = ("; or, as another analysis of these claims, test them in a store of their own (--set state.store=PATH), "
             "which makes a second test of each: the guarantee is then per store")


def adopt_legacy(cfg, data, ledger: ClaimLedger, identities) -> None:
    """Claims the ledger holds under an earlier release's identity move to their key now (ClaimLedger.adopt)."""
    kind = source_of(cfg)
    for k, identity in enumerate(identities):
        legacy = None if identity is None else kind.legacy_claim_identity(cfg, data, k)
        if legacy is not None:
            old = identity_key({**legacy, "unit": data.unit})
            ledger.adopt(claim_key(old, cfg.alpha / data.unit), claim_key(identity, cfg.alpha / data.unit))


def claim_starts(cfg, data, job_dir=None) -> list[ClaimStart | None]:
    """Each candidate's claim in the store's ledger (None: no identity, or the store is off). A claim tested before is
    continued: its recorded test on its consumed items, then new ones in its first run's order. With ``job_dir`` (a
    job that runs) the runs continued are pinned in the job's folder (a resumed job starts where it started) and the
    job holds its claims until it ends. Bad input (:class:`InputError`): a claim held by another unfinished job, or
    tested before with another policy, bet, judge ratio, observation or sampling, at a looser level, or by a policy
    whose test cannot be continued."""
    identities = claim_identities(cfg, data)
    if all(i is None for i in identities):
        return [None] * len(identities)
    from certsel.config.identity import config_fingerprint

    fp = config_fingerprint(cfg, data.fingerprint)
    if cfg.proc.ranking:  # a ranking's test cannot be continued yet: one configuration per ranking claim
        _check_ranking(cfg, identities, fp)
        return [None] * len(identities)
    pins = json.loads(pin_file(job_dir).read_text()) if job_dir is not None and pin_file(job_dir).exists() else {}
    job = None if job_dir is None else pathlib.Path(job_dir).name
    ledger = ClaimLedger(cfg.state.store)
    out = []
    try:
        adopt_legacy(cfg, data, ledger, identities)
        family = _check_family(cfg, data, ledger, identities, job)
        if family is not None and job is not None:  # held from the start: a killed job's family stays recorded
            ledger.record_family(family.members, family)
        for k, identity in enumerate(identities):
            mirrored = _mirror_start(cfg, data, ledger, k, identity, fp, job, pins)
            out.append(mirrored if mirrored is not None else None if identity is None else
                       _start(cfg, data, ledger, claim_key(identity, cfg.alpha / data.unit), data.names[k], fp, job,
                              pins))
        if job_dir is not None:
            for c in out:
                if c is not None and not c.recompute:
                    _hold(cfg, data, ledger, c, job)
    finally:
        ledger.close()
    if job_dir is not None and not pins:
        pin_file(job_dir).write_text(json.dumps({c.key: (c.base.seq if c.continued else 0) for c in out if c}))
    return out


def changed_measurements(cfg, data) -> list[str]:
    """One line per candidate whose claim is new although its place (its table file and name there) held another
    claim at this level: its measurements changed (a value beyond 6 decimals, items added or removed), so its test
    starts anew at delta, which the job says rather than doing quietly (docs/gate.md, "Every door of a rerun")."""
    if cfg.state.store is None or not pathlib.Path(cfg.state.store).exists():
        return []
    kind, out = source_of(cfg), []
    ledger = ClaimLedger(cfg.state.store)
    try:
        for k, identity in enumerate(claim_identities(cfg, data)):
            place = None if identity is None else kind.claim_place(cfg, data, k)
            if place is None:
                continue
            key, alpha = claim_key(identity, cfg.alpha / data.unit), cfg.alpha / data.unit
            mirrored = mirror_key(cfg, data, k, identity)
            if ledger.runs(key) or (mirrored is not None and ledger.runs(mirrored)):
                continue
            before = [(c, j) for c, j in ledger.at_place(place, alpha) if c != key and ledger.runs(c)]
            if before:
                claim, job = before[-1]
                t = max(r.t for r in ledger.runs(claim))
                out.append(f"{data.names[k]}: a new claim ({claim_words(cfg)}): its measurements in "
                           f"{pathlib.Path(cfg.data.path).name} differ from those its claim was tested on before (job "
                           f"{job or '?'}, {t} labels): a value changed beyond 6 decimals, or items were added or "
                           "removed, so its test starts anew at delta (docs/gate.md, 'Every door of a rerun')")
        return out
    finally:
        ledger.close()


def moved_on(cfg, data, job_dir) -> list[str]:
    """The candidates of the finished job in ``job_dir`` whose claim the ledger has moved on since (a later run of
    another configuration recorded it): that job's outcome is no longer where their test stands, so it cannot answer a
    rerun. Empty without a store."""
    pins_at = pin_file(job_dir)
    if cfg.state.store is None or not pathlib.Path(cfg.state.store).exists():
        return []
    from certsel.config.identity import config_fingerprint

    pins = json.loads(pins_at.read_text()) if pins_at.exists() else {}
    fp, job = config_fingerprint(cfg, data.fingerprint), pathlib.Path(job_dir).name
    ledger = ClaimLedger(cfg.state.store)
    try:
        out = []
        identities = claim_identities(cfg, data)
        adopt_legacy(cfg, data, ledger, identities)
        for name, identity in zip(data.names, identities, strict=True):
            if identity is None:
                continue
            key = claim_key(identity, cfg.alpha / data.unit)
            mirrored = mirror_key(cfg, data, data.names.index(name), identity)
            if mirrored is not None and not ledger.runs(key):  # kept as first tested, with its sides exchanged
                key = mirrored
            done = [r for r in ledger.runs(key) if r.outcome not in (RUNNING, DROPPED)]
            if done and not (done[-1].job == job or done[-1].fingerprint == fp or done[-1].seq == pins.get(key)):
                out.append(name)
        return out
    finally:
        ledger.close()


def _start(cfg, data, ledger: ClaimLedger, key: str, name: str, fp: str, job: str | None, pins: dict,
           mirror_of: str | None = None) -> ClaimStart:
    def gone(holder):  # a job whose folder is gone will never end: its hold is dropped
        return holder is None or not (pathlib.Path(cfg.state.dir) / holder).exists()

    lost = [r for r in ledger.runs(key) if r.outcome == RUNNING and r.job != job and gone(r.job)]
    if job is not None:  # a job that runs marks them, a check before it only reads
        for run in lost:  # written ahead: its test continues from there; else it had bought nothing
            ledger.drop(key, run.seq, INTERRUPTED if "candidate" in run.state else DROPPED)
    try:
        base, recompute = ledger.plan(key, fp, job, None if pins.get(key) is None else int(pins[key]), stale=gone)
    except ClaimBusy as busy:
        raise InputError(f"{name}: its claim ({claim_words(cfg)}) is under test by the unfinished job "
                         f"{busy.job}: let it end or resume it (certsel run --resume {busy.job}); a run beside it "
                         "would be a second test") from None
    if base is None:
        return ClaimStart(key, fp, recompute=recompute)
    if mirror_of is not None:  # the ledger keeps the claim as first tested: seen from this side
        base = mirror_base(base, mirror_of)
    _check_same_test(cfg, base, name)
    human, judge = continued_orders(base, data.n_items, cfg.budget.n, cfg.policy.without_replacement,
                                    _planned(ledger.runs(key), base, job))
    return ClaimStart(key, fp, base, human, judge, recompute=recompute)


def selection_family(cfg, data, identities, job: str | None = None) -> ClaimFamily | None:
    """The family a selection tests its claims in (None: a gate, whose outcomes are per candidate, a ranking, or a
    procedure without a simultaneous statement): its procedure and its claims, a fixed sequence's in its order from
    its start."""
    proc = cfg.proc
    if proc.gates or proc.ranking or not proc.simultaneous:
        return None
    keys = [claim_key(i, cfg.alpha / data.unit) for i in identities if i is not None]
    return ClaimFamily.of(cfg.procedure, keys, proc.needs_order, job) if keys else None


def _check_family(cfg, data, ledger: ClaimLedger, identities, job: str | None) -> ClaimFamily | None:
    """A rerun keeps the family its claims were tested in: a selection whose procedure, candidates or order differ
    from a claim's recorded family, or that takes in a claim tested on its own before (a gate), is bad input, since a
    family chosen after seeing its claims' evidence (a sequence re-sorted by its e-values, a family shrunk to its
    leaders) could certify a false claim at the full delta."""
    family = selection_family(cfg, data, identities, job)
    if family is None:
        return None
    names = dict(zip([None if i is None else claim_key(i, cfg.alpha / data.unit) for i in identities], data.names))
    for key in family.members:
        then = ledger.family(key)
        tested = [r for r in ledger.runs(key) if (job is None or r.job != job) and r.outcome != DROPPED]
        where = f"{names[key]}: its claim ({claim_words(cfg)}) was tested before"
        if then is None and tested:
            raise InputError(f"{where} outside any recorded family (a gate, job {tested[-1].job or '?'}); a "
                             "selection over it would choose its family after seeing that evidence: gate it again, or "
                             "select in a store of its own (state.store)")
        change = None if then is None else then.change(family)
        if change is not None:
            raise InputError(f"{where} in a {then.procedure} family of {len(then.members)} candidates (job "
                             f"{then.job or '?'}); this run's family differs: {change}. A rerun keeps its "
                             "claims' family, since one chosen after seeing their evidence could certify a false "
                             "claim: keep it, or test the new family in a store of its own (state.store)")
    return family


def _mirror_start(cfg, data, ledger: ClaimLedger, k: int, identity: str | None, fp: str, job: str | None,
                  pins: dict) -> ClaimStart | None:
    """A regression claim whose statement was tested the other way round (its sides exchanged, the level 1 - alpha:
    "Y beats X by m" as X against Y): that one test continues, seen from this side (mirror_base), so one statement
    keeps one test. None: no such test. Bad input where it cannot continue: a selection (its family is the other
    side's), or a run recorded without its fail test's path (before certsel recorded it)."""
    own, key = claim_key(identity, cfg.alpha / data.unit), mirror_key(cfg, data, k, identity)
    if key is None or key == own or ledger.runs(own):  # no regression, a model against itself, or this side tested
        return None
    tested = [r for r in ledger.runs(key) if r.outcome != DROPPED and (job is None or r.job != job)]
    if not tested:
        return None
    reg, name = cfg.regression, data.names[k]
    then = "non-inferiority" if reg.superiority else "superiority"
    where = (f"{name} against {reg.baseline}: this claim's statement was tested before with the sides exchanged "
             f"({reg.baseline} against {name}, {then} at margin {reg.margin:g}; job {tested[-1].job or '?'}, "
             f"{tested[-1].t} labels), whose pass is this claim's fail")
    if not cfg.proc.gates:
        raise InputError(f"{where}: a selection cannot continue that gate's test; gate it ({cfg.regression.baseline} "
                         "against the candidates, or this way as a gate, which continues it)")
    start = _start(cfg, data, ledger, key, name, fp, job, pins, mirror_of=where)
    return dataclasses.replace(start, mirrored=True)


def mirror_key(cfg, data, k: int, identity: str | None) -> str | None:
    """The key of candidate ``k``'s regression claim with its sides exchanged (None: no regression, or no identity).
    Its level is computed as that side's job computes it (the opposite claim's alpha, not 1 - alpha: the two differ in
    the last bit for most margins, and a key is exact)."""
    mirror = None if identity is None else source_of(cfg).mirror_claim_identity(cfg, data, k)
    if mirror is None:
        return None
    reg = cfg.regression.claim
    opposite = dataclasses.replace(reg, superiority=not reg.superiority)
    return claim_key(identity_key({**mirror, "unit": data.unit}), opposite.alpha / data.unit)


def mirror_base(run: ClaimRun, where: str) -> ClaimRun:
    """``run`` seen from its claim's other side: its fail test (the same test on the mirrored losses 1 - u at level
    1 - alpha) is this side's pass test and the other way round, their e-value paths with them; the items are the
    same. Bad input when the run kept no fail-test path or the two tests were held to different levels."""
    st, cand = run.state, run.state.get("candidate", {})
    path = st.get("futility_path")
    if "futility" not in cand or path is None or len(path) != len(st.get("path", ())) or run.outcome == INTERRUPTED:
        raise InputError(f"{where}; that run kept no fail-test path to continue from (recorded before certsel kept "
                         "one, or interrupted): rerun it the way it was tested")
    if cand["test"]["config"].get("delta") != cand["futility"]["config"].get("delta"):
        raise InputError(f"{where}; its pass and fail tests were held to different levels: rerun it the way it was "
                         "tested")
    flipped = {**st, "candidate": {**cand, "test": cand["futility"], "futility": cand["test"]},
               "path": path, "futility_path": st["path"]}
    return dataclasses.replace(run, state=flipped, outcome=_FLIP.get(run.outcome, run.outcome))


_FLIP = {"pass": "fail", "fail": "pass", "certified": "futile", "futile": "certified"}


def _planned(runs, base, job: str | None) -> list[tuple]:
    """The (human, judge) items every other run of the claim planned (not ``job``'s own, which a resumed job plans
    again): they stay consumed, whether or not it bought them (the base's own plan comes first in its continuation)."""
    out = []
    for r in runs:
        if r.seq == base.seq or r.state is None or (job is not None and r.job == job):
            continue
        h = r.state.get("planned_human", r.state.get("human_items") if r.outcome in (RUNNING, DROPPED) else None)
        j = r.state.get("planned_judge", r.state.get("judge_items") if r.outcome in (RUNNING, DROPPED) else None)
        if h is not None:
            out.append((h, () if j is None else j))
    return out


def _hold(cfg, data, ledger: ClaimLedger, c: ClaimStart, job: str) -> None:
    """The job holds the claim while it runs; the hold names the items it plans (consumed if it never ends)."""
    if c.continued:
        human, judge = c.human_items, c.judge_items
    elif continues(cfg.policy.policy_kind):
        r = cfg.budget.r if cfg.policy.uses_judge else 0
        human, judge = label_orders(data.n_items, cfg.seed, cfg.budget.n, r, cfg.policy.without_replacement)
    else:
        human = judge = np.zeros(0, dtype=np.int64)
    try:
        ledger.begin(c.key, c.fingerprint, job, c.base.seq if c.continued else 0,
                     {"jobs": [job], "human_items": np.asarray(human), "judge_items": np.asarray(judge)})
    except ClaimBusy as busy:
        raise InputError(f"its claim {c.key[:12]} was continued by job {busy.job or '?'} meanwhile: run again") from None


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
    """A rerun continues the claim's recorded test: the settings that make the test must be the recorded ones, and its
    level may not be looser than the first run's (a level chosen after seeing the evidence is no level)."""
    pol = cfg.policy
    where = f"{name}: its claim ({claim_words(cfg)}) was tested before (job " \
            f"{(base.state.get('jobs') or [None])[-1] or '?'}, {base.t} labels)"
    if base.state.get("kind") != pol.kind:
        raise InputError(f"{where} with policy.kind {base.state.get('kind')!r}; a rerun continues that test: set "
                         f"policy.kind: {base.state.get('kind')} (another alpha, or other labels, is another claim)"
                         + ELSEWHERE)
    if not continues(pol.policy_kind):
        raise InputError(f"{where} by policy {pol.kind!r}, whose test cannot be continued; rerun that job's "
                         "configuration (it is recomputed), or test another claim")
    if cfg.delta > base.state["delta"]:
        raise InputError(f"{where} at delta {base.state['delta']:g}; a rerun states it at that level or a stricter "
                         f"one, not at delta {cfg.delta:g}")
    test = base.state["candidate"]["test"]["config"]
    now = {"policy.betting": pol.strategy.spec(), "budget.r": max(cfg.budget.r, 1) if pol.uses_judge else 1,
           "policy.observation": pol.observation,
           "policy.sampling": "without-replacement" if pol.without_replacement else "iid"}
    then = {"policy.betting": dict(test["betting"]), "budget.r": int(test["r"]), "policy.observation":
            test["observation"], "policy.sampling": "without-replacement" if "population" in test else "iid"}
    differ = [f"{k} {then[k]!r} (now {now[k]!r})" for k in now if now[k] != then[k]]
    if differ:
        raise InputError(f"{where} with {', '.join(differ)}; a rerun continues that test: set them as then" + ELSEWHERE)


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
        # the fail test's path too: the budget stop judges the whole test, so a claim it stopped stays stopped at the
        # same budget (a rerun with a larger one has more left and goes on)
        r.futility_path = [float(x) for x in base.state.get("futility_path", ())]
        r.exhausted = base.t >= len(spec.claim.human_items)
        r.status = Status.RUNNING
        r.claim = ContinuedClaim(base.runs, base.t, np.asarray(spec.claim.human_items), dict(test["config"]),
                                 list(base.state.get("jobs", [])))


def _test_state(cfg, claim: ClaimStart, r: CandidateRecord, candidate_state: dict, job: str | None) -> dict:
    """What the ledger keeps of a run of the claim: its candidate's test state and consumed items, the e-process path,
    and the chain's first seed and level."""
    before = claim.base.state if claim.continued else {"seed": cfg.seed, "delta": cfg.delta}
    out = {**candidate_state, "path": np.asarray(r.path, dtype=np.float64), "kind": cfg.policy.kind,
           "runs": int(before.get("runs", 0)) + 1, "jobs": [*before.get("jobs", []), job],
           "seed": before["seed"], "delta": before["delta"]}
    # the fail test's path over the whole test (the earlier runs' and this one's), so that the claim's statement can be
    # continued from its other side (mirror_base)
    futility = list(r.futility_path)  # primed with the earlier runs' (prime), as ``r.path`` is
    if len(futility) == len(r.path):
        out["futility_path"] = np.asarray(futility, dtype=np.float64)
    if claim.mirrored:  # kept as the claim was first tested: its pass and fail tests exchanged back
        cand = out.get("candidate", {})
        if "futility" not in cand or "futility_path" not in out:  # mirror_base required both: a broken invariant
            raise RuntimeError(f"{r.name}: a continued mirrored claim without its fail test's whole path")
        out["candidate"] = {**cand, "test": cand["futility"], "futility": cand["test"]}
        out["path"], out["futility_path"] = out["futility_path"], out["path"]
    return out


def write_ahead(plan, pool, records: list[CandidateRecord], job_dir) -> None:
    """Each held claim's test as it stands now, into the ledger (write-ahead): if the job never ends (killed, its
    folder cleaned), a later run continues the claim from here and replays, from the store, the labels bought since, so
    no evidence the job bought is dropped and no housekeeping turns the claim into a fresh test. Called before the
    first round and at every checkpoint."""
    cfg = plan.cfg
    if job_dir is None or cfg.state.store is None or plan.procedure.ranking or not continues(cfg.policy.policy_kind):
        return
    held = {s.name: s.claim for s in plan.specs if s.claim is not None and not s.claim.recompute}
    if not held:
        return
    states = pool.claim_states(list(held))
    job = pathlib.Path(job_dir).name
    ledger = ClaimLedger(cfg.state.store)
    try:
        ledger.write_ahead_all(job, [(held[r.name].key, r.t, _test_state(cfg, held[r.name], r, states[r.name], job))
                                     for r in records if r.name in held and r.name in states])
    finally:
        ledger.close()


def record(plan, pool, records: list[CandidateRecord], certified: set, job_dir) -> None:
    """Each claim's test after this job, as a run of the claim in the ledger; a job that added no label to a claim
    lets go of it, and a recomputation of a recorded configuration adds nothing."""
    cfg = plan.cfg
    job = None if job_dir is None else pathlib.Path(job_dir).name
    if plan.procedure.ranking and cfg.state.store is not None:
        _record_ranking(plan, records, job)
        return
    with_claim = {s.name: s.claim for s in plan.specs if s.claim is not None and not s.claim.recompute}
    if not with_claim:
        return
    family = selection_family(cfg, plan.data, claim_identities(cfg, plan.data), job)
    ran = [r for r in records if r.name in with_claim and r.t > (with_claim[r.name].base.t
                                                                  if with_claim[r.name].continued else 0)]
    states = pool.claim_states([r.name for r in ran]) if ran else {}
    by_name = {r.name: r for r in records}
    ledger = ClaimLedger(cfg.state.store)
    try:
        if family is not None:
            ledger.record_family(family.members, family)
        for name, claim in with_claim.items():
            r = by_name[name]
            base = claim.base.seq if claim.continued else 0
            if r not in ran or (continues(cfg.policy.policy_kind) and name not in states):
                ledger.finish(claim.key, claim.fingerprint, job, base, r.t, "", None)  # nothing added: let go
                continue
            state = _test_state(cfg, claim, r, states.get(name, {}), job)
            place = source_of(cfg).claim_place(cfg, plan.data, plan.data.names.index(name))
            if place is not None and not claim.mirrored:
                ledger.record_place(place, cfg.alpha / plan.data.unit, claim.key, job)
            try:
                outcome = str(Outcome.of(r.status, name in certified))
                ledger.finish(claim.key, claim.fingerprint, job, base, r.t,
                              _FLIP.get(outcome, outcome) if claim.mirrored else outcome, state)
            except ClaimBusy:  # a job without a folder, beside another run of the claim: not recorded
                log.warning("%s: its claim was continued by another run meanwhile; this run is not recorded", name)
    finally:
        ledger.close()


def _record_ranking(plan, records, job) -> None:
    from certsel.config.identity import config_fingerprint

    key = ranking_key(plan.cfg, claim_identities(plan.cfg, plan.data))
    if key is None:
        return
    fp = config_fingerprint(plan.cfg, plan.data.fingerprint)
    ledger = ClaimLedger(plan.cfg.state.store)
    try:
        runs = ledger.runs(key)
        if not any(r.fingerprint == fp for r in runs):
            ledger.finish(key, fp, job, max([r.seq for r in runs], default=0), sum(r.n_human for r in records),
                          "ranked", {"kind": "ranking", "runs": 1, "jobs": [job]})
    finally:
        ledger.close()
