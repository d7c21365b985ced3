"""llm-compressor's lm-eval test configs, read as they are, as certsel gate jobs.

llm-compressor's end-to-end tests (``tests/lmeval/configs/*.yaml``) pass when, for each metric under
``lmeval.metrics``, round(compressed / base, 2) >= ``lmeval.recovery_threshold`` (one number, or one per metric) on
the first ``lmeval.limit`` documents. :func:`gate_job` states the same claim for ``certsel gate``: recovery >= the
threshold on the config's task, metric and few-shot setting, ``limit`` as the budget, documents in a seeded random
order, the existing checkpoint ``compressed`` as the candidate and the base model as the reference (the compression
is not run). The flat form (``model``, ``model_args``, ``task``, ``num_fewshot``, ``limit``,
``recovery_threshold`` at the top level) is read too. See docs/gate.md.
"""

from __future__ import annotations

import pathlib

from certsel.errors import InputError

# llm-compressor's default when a config gives no threshold
DEFAULT_THRESHOLD = 0.95
DEFAULT_LIMIT = 1000
# lm-eval model arguments the configs set under lmeval: (or model_args:), passed on as they are
_MODEL_ARGS = ("dtype", "add_bos_token", "max_model_len", "trust_remote_code", "gpu_memory_utilization",
               "tensor_parallel_size", "enforce_eager")


def is_llmcompressor(raw: dict) -> bool:
    """Whether a YAML mapping is an llm-compressor lm-eval test config (not a certsel job)."""
    return isinstance(raw, dict) and ("lmeval" in raw or {"recovery_threshold", "task"} <= set(raw)) \
        and "model" in raw and not any(k in raw for k in ("data", "live", "labels", "source", "tasks"))


def _metric(lm: dict, where: str) -> tuple[str, str | None, str]:
    """(lm-eval metric, filter, the config's key) of the first metric the config checks."""
    metrics = lm.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise InputError(f"{where}: lmeval.metrics must be a mapping of 'metric,filter' keys")
    key = next(iter(metrics), None) or lm.get("metric") or "acc,none"
    metric, _, filt = str(key).partition(",")
    return metric, (filt or None) if filt != "none" else None, str(key)


def _threshold(lm: dict, key: str, where: str) -> float:
    t = lm.get("recovery_threshold", DEFAULT_THRESHOLD)
    if isinstance(t, dict):
        if key not in t:
            raise InputError(f"{where}: lmeval.recovery_threshold has no threshold for metric {key!r}")
        t = t[key]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 100:
        raise InputError(f"{where}: lmeval.recovery_threshold must be a number in (0, 100], got {t!r}")
    return float(t)


def _args(pretrained: str, lm: dict, extra) -> str:
    args = {"pretrained": pretrained}
    if isinstance(extra, dict):
        args.update({k: v for k, v in extra.items() if k != "pretrained"})
    elif isinstance(extra, str) and extra:
        args.update(dict(p.split("=", 1) for p in extra.split(",") if "=" in p and not p.startswith("pretrained=")))
    args.update({k: lm[k] for k in _MODEL_ARGS if k in lm})
    return ",".join(f"{k}={v}" for k, v in args.items())


def gate_job(raw: dict, *, compressed: str, base: str | None = None, name: str = "llm-compressor",
             where: str = "config") -> dict:
    """The certsel job (a mapping) gating ``compressed`` against ``base`` (default: the config's ``model``)."""
    if not compressed:
        raise InputError(f"{where}: an llm-compressor config gates a compressed checkpoint: give it (certsel gate "
                         "CONFIG --compressed PATH)")
    lm = dict(raw.get("lmeval") or {k: raw[k] for k in raw if k not in ("model", "cadence")})
    task = lm.get("task")
    if not isinstance(task, str) or not task:
        raise InputError(f"{where}: lmeval.task is missing")
    metric, filt, key = _metric(lm, where)
    limit = lm.get("limit", DEFAULT_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InputError(f"{where}: lmeval.limit must be a whole number of documents (certsel's budget), got {limit!r}")
    model = lm.get("model", "vllm") if "lmeval" in raw else "hf"
    extra = lm.get("model_args", raw.get("model_args"))
    common = {"model": model, "num_fewshot": lm.get("num_fewshot"),
              "apply_chat_template": bool(lm.get("apply_chat_template", False))}
    base = base or raw["model"]
    return {
        "name": name,
        "labels": {"kind": "lm-eval", "task": task, "metric": metric, "filter": filt,
                   "candidates": [{"id": pathlib.PurePath(str(compressed)).name or str(compressed),
                                   "model_args": _args(str(compressed), lm, extra), **common}],
                   "reference": {"id": str(base), "model_args": _args(str(base), lm, extra), **common}},
        "recovery": {"at_least": _threshold(lm, key, where), "reference_name": str(base)},
        "policy": {"kind": "r-eval"},
        "procedure": "gate",
        "budget": {"n": limit},
    }
