"""certsel.policies: the statistics, pure numpy/scipy with no I/O.

Testing by betting (R-Eval, R-AutoEval, R-AutoEval+), certified estimation (Seq, Cer-Eval:
stratified sampling with one betting confidence sequence), anytime-valid confidence bounds,
and multiple testing over candidates. Nothing here imports Ray, MLflow or HTTP code.
"""

from .autoeval import (
    DEFAULT_RHOS,
    SCHEMES,
    EffectiveObservations,
    TestResult,
    certify,
    confidence_interval,
    effective_observations,
    evalue_path,
    evalue_paths,
    log_evalue_paths,
    lower_confidence_bound,
    scheme_rhos,
    test_from_log_evalues,
    upper_confidence_bound,
)
from .betting import BETTING_STRATEGIES, BettingState, UPPrior, up_prior, wsr_fractions
from .cer_eval import (
    RADII,
    Base,
    CerEval,
    EstimationPolicy,
    EstimationResult,
    Seq,
    oracle,
)
from .multiple_testing import (
    PROCEDURES,
    bonferroni,
    certified_set,
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
from .sequential import SequentialTest
from .stratified import StratifiedBetting, seq_paths

__all__ = [
    "BETTING_STRATEGIES",
    "DEFAULT_RHOS",
    "PROCEDURES",
    "RADII",
    "SCHEMES",
    "Base",
    "BettingCS",
    "BettingState",
    "CerEval",
    "EffectiveObservations",
    "EstimationPolicy",
    "EstimationResult",
    "FixedPartition",
    "NearestNeighborPartition",
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
    "certified_set",
    "certify",
    "confidence_interval",
    "effective_observations",
    "epsilon_star",
    "evalue_path",
    "evalue_paths",
    "fixed_sequence",
    "hoeffding_radius",
    "holm",
    "log_evalue_paths",
    "lower_confidence_bound",
    "oracle",
    "p_values",
    "prpl_path",
    "scheme_rhos",
    "score_partition",
    "select",
    "seq_paths",
    "test_from_log_evalues",
    "up_prior",
    "upper_confidence_bound",
    "wsr_fractions",
]
