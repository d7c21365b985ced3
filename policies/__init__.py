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

from .autoeval import (
    DEFAULT_RHOS,
    SCHEMES,
    EffectiveObservations,
    TestResult,
    certify,
    decision_fractions,
    effective_observations,
    evalue_path,
    evalue_paths,
    judge_agreement,
    log_evalue_paths,
    scheme_rhos,
    test_from_log_evalues,
)
from .autoeval_bounds import (
    confidence_interval,
    decision_upper_bound,
    interval_excludes,
    lower_confidence_bound,
    upper_confidence_bound,
)
from .bets import BETS, Bet, BetUse, bet_names, get_bet, register_bet
from .betting import (
    ONS,
    UP,
    WSR,
    BetContext,
    BettingState,
    BettingStrategy,
    UPPrior,
    bet_log_factors,
    get_strategy,
    register_strategy,
    up_prior,
)
from .bounds import inverted_upper_bound, max_log_wealth
from .cer_eval import Base, CerEval, Seq, oracle
from .estimation import RADII, EstimationPolicy, EstimationResult
from .multiple_testing import (
    bonferroni,
    fixed_sequence,
    holm,
    p_values,
    select,
)
from .confseq import BettingCS
from .partition import FixedPartition, NearestNeighborPartition, ScorePartition, score_partition
from .radius import (
    adaptive_hoeffding_radius,
    bernstein_eta,
    bernstein_radius,
    epsilon_star,
    hoeffding_radius,
    prpl_path,
)
from .recovery import Recovery, recovery_lower_bound, recovery_of
from .sampling import IID, Sampling, WithoutReplacement
from .seq_bank import SeqBank
from .sequential import SequentialTest
from .stratified import StratifiedBetting, seq_paths

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
