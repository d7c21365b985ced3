"""certsel.policies: the statistics, pure numpy/scipy with no I/O.

Testing by betting (R-Eval, R-AutoEval, R-AutoEval+), certified estimation (Seq, Cer-Eval: stratified sampling with one
betting confidence sequence), anytime-valid confidence bounds, and multiple testing over candidates. Nothing here
imports Ray, MLflow or HTTP code.

Equation, section and algorithm numbers in docstrings refer to the papers the package implements: "Adaptive
Prediction-Powered AutoEval with Reliability and Efficiency Guarantees" (Park, Zecchin and Simeone; R-Eval, R-AutoEval,
R-AutoEval+, "eq." and "App." in :mod:`~certsel.policies.autoeval`, :mod:`~certsel.policies.betting` and
:mod:`~certsel.policies.sequential`), "Cer-Eval: Certifiable and Cost-Efficient Evaluation Framework for LLMs" (Wang,
Chen, Li and Xu; Seq, Cer-Eval and pairwise comparison in :mod:`~certsel.policies.cer_eval`,
:mod:`~certsel.policies.radius`, :mod:`~certsel.policies.partition`, :mod:`~certsel.policies.comparison`) and
"Fault-Tolerant Evaluation for Sample-Efficient Model Performance Estimators" (Zhu, Wu and Xu; FT-Eval in
:mod:`~certsel.policies.ft_eval`). The betting confidence sequences follow Waudby-Smith and Ramdas, "Estimating means of
bounded random variables by betting" (arXiv:2010.09686).
"""

import importlib

# where each public name lives: a name is imported from its module when first used (PEP 562), so that reading a job
# file (the registries of bets, procedures and policy kinds) does not import every policy and scipy with it
_MODULES = {
    "autoeval": ("DEFAULT_RHOS", "SCHEMES", "EffectiveObservations", "TestResult", "certify", "decision_fractions",
                 "effective_observations", "evalue_path", "evalue_paths", "judge_agreement", "log_evalue_paths",
                 "scheme_rhos", "test_from_log_evalues"),
    "autoeval_bounds": ("confidence_interval", "decision_upper_bound", "interval_excludes", "lower_confidence_bound",
                        "upper_confidence_bound"),
    "bets": ("BETS", "Bet", "BetUse", "bet_names", "get_bet", "register_bet"),
    "betting": ("ONS", "UP", "WSR", "BetContext", "BettingState", "BettingStrategy", "UPPrior", "bet_log_factors",
                "get_strategy", "register_strategy", "up_prior"),
    "bounds": ("inverted_upper_bound", "max_log_wealth"),
    "cer_eval": ("Base", "CerEval", "Seq", "oracle"),
    "estimation": ("RADII", "EstimationPolicy", "EstimationResult"),
    "multiple_testing": ("bonferroni", "fixed_sequence", "holm", "p_values", "select"),
    "confseq": ("BettingCS",),
    "partition": ("FixedPartition", "NearestNeighborPartition", "ScorePartition", "score_partition"),
    "radius": ("adaptive_hoeffding_radius", "bernstein_eta", "bernstein_radius", "epsilon_star", "hoeffding_radius",
               "prpl_path"),
    "recovery": ("Recovery", "recovery_lower_bound", "recovery_of"),
    "sampling": ("IID", "Sampling", "WithoutReplacement"),
    "seq_bank": ("SeqBank",),
    "sequential": ("SequentialTest",),
    "stratified": ("StratifiedBetting", "seq_paths"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # found once
    return value


def __dir__():
    return sorted([*globals(), *_WHERE])


__all__ = [
    "BETS",
    "Bet",
    "BetUse",
    "bet_names",
    "get_bet",
    "register_bet",
    "IID",
    "Sampling",
    "WithoutReplacement",
    "DEFAULT_RHOS",
    "RADII",
    "SCHEMES",
    "Base",
    "BetContext",
    "BettingCS",
    "BettingState",
    "BettingStrategy",
    "ONS",
    "UP",
    "WSR",
    "CerEval",
    "EffectiveObservations",
    "EstimationPolicy",
    "EstimationResult",
    "FixedPartition",
    "NearestNeighborPartition",
    "Recovery",
    "Seq",
    "ScorePartition",
    "SequentialTest",
    "StratifiedBetting",
    "TestResult",
    "UPPrior",
    "adaptive_hoeffding_radius",
    "bernstein_eta",
    "bernstein_radius",
    "bonferroni",
    "certify",
    "confidence_interval",
    "decision_fractions",
    "decision_upper_bound",
    "inverted_upper_bound",
    "max_log_wealth",
    "bet_log_factors",
    "effective_observations",
    "epsilon_star",
    "evalue_path",
    "evalue_paths",
    "fixed_sequence",
    "get_strategy",
    "hoeffding_radius",
    "interval_excludes",
    "judge_agreement",
    "holm",
    "log_evalue_paths",
    "lower_confidence_bound",
    "oracle",
    "p_values",
    "prpl_path",
    "recovery_lower_bound",
    "recovery_of",
    "register_strategy",
    "scheme_rhos",
    "score_partition",
    "select",
    "seq_paths",
    "SeqBank",
    "test_from_log_evalues",
    "up_prior",
    "upper_confidence_bound",
]
