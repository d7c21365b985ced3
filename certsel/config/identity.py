"""A job's identity: what makes two runs the same job. It names the job folder
(:mod:`certsel.orchestrator.engine.state`) and ties outside state to the job (label-studio's project marker)."""

from __future__ import annotations

import hashlib
import json

from certsel.policies.budget_stop import RULE_VERSION as BUDGET_STOP_RULE

from .schema import RunConfig
from .sections import PILOT_KEYS


def config_fingerprint(cfg: RunConfig, data_fingerprint: str) -> str:
    """What makes two runs the same job: the configuration that decides labels and
    statistics (not where it is tracked, run or named), the data's content and the label store whose ledger holds
    its claims' tests (a finished job answers a rerun only when it ran in the same ledger)."""
    # the pilot's keys only when the job starts from one: jobs from before they existed keep their identity
    pilot = set() if cfg.scheduling.start == "pilot" else set(PILOT_KEYS)
    pilot |= {"budget_stop"} if cfg.scheduling.budget_stop is None else set()  # likewise: only when on
    sampling = set() if cfg.policy.sampling != "iid" else {"sampling"}  # likewise: only when not the default
    bet = set() if cfg.pairwise.bet is not None else {"bet"}  # likewise: only when set
    body = cfg.model_dump(mode="json", exclude={"name": True, "tracking": True, "ray": True, "runtime": True, "state": True,
                                                "scheduling": pilot, "policy": sampling, "pairwise": bet,
                                                "data": {"measures"}, "tasks": {"__all__": {"data": {"measures"}}}})
    identity = {"config": body, "data": data_fingerprint}
    if cfg.state.store is not None:  # a job answers a rerun only in its own ledger (a run without one: none)
        identity["store"] = str(cfg.state.store)
    if cfg.scheduling.budget_stop is not None:  # the stop's rule decides which labels are bought
        identity["budget_stop_rule"] = BUDGET_STOP_RULE
    canon = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:24]
