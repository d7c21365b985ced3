"""A job's identity: what makes two runs the same job (the configuration that decides labels
and statistics, and the data's content). The job folder is named by it
(:mod:`certsel.orchestrator.engine.state`), and a label source that keeps state outside
certsel ties it to the job by it (the label-studio source's project marker)."""

from __future__ import annotations

import hashlib
import json

from .schema import PILOT_KEYS, RunConfig


def config_fingerprint(cfg: RunConfig, data_fingerprint: str) -> str:
    """What makes two runs the same job: the configuration that decides labels and
    statistics (not where it is tracked, run or named) and the data's content."""
    # the pilot's keys only when the job starts from one: jobs from before they existed keep their identity
    pilot = set() if cfg.scheduling.start == "pilot" else set(PILOT_KEYS)
    # likewise policy.sampling only when it is not the i.i.d. default
    sampling = set() if cfg.policy.sampling != "iid" else {"sampling"}
    # and pairwise.bet only when set (None: the pair policies' default bet)
    bet = set() if cfg.pairwise.bet is not None else {"bet"}
    body = cfg.model_dump(mode="json", exclude={"name": True, "tracking": True, "ray": True, "state": True,
                                                "scheduling": pilot, "policy": sampling, "pairwise": bet,
                                                "data": {"measures"}, "tasks": {"__all__": {"data": {"measures"}}}})
    canon = json.dumps({"config": body, "data": data_fingerprint}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:24]
