"""Job configuration for ``certsel run CONFIG.yaml``: a validated pydantic schema.

Unknown keys and bad values are errors that name the key (``policy.betting: Input should be
'up' or 'wsr'``), raised as :class:`ConfigError` with a one-line message. Relative data
paths are resolved against the directory of the config file.

One module per concern: :mod:`~certsel.config.schema` (the sections and :class:`RunConfig`,
validated once against the registries), :mod:`~certsel.config.sources` (the label-source
sections), :mod:`~certsel.config.loading` (YAML, ``--set`` overrides, plugins, paths) and
:mod:`~certsel.config.base` (the error and the strict base model).

Example (``examples/quantization.yaml``)::

    name: quantization-triviaqa
    data:
      path: data/triviaqa_llama31_8b_mx.parquet
      judge: loss_judge_best
      order: rank
    policy: {kind: r-autoeval+, betting: up}
    alpha: 0.1
    delta: 0.1
    procedure: fst
    objective: {column: avg_bitwidth, goal: minimize}
    budget: {n: 300, r: 3}
"""

from .base import ConfigError
from .loading import apply_overrides, load_config, load_plugins, parse_config
from .schema import (
    AggregateConfig,
    BudgetConfig,
    CostsConfig,
    ObjectiveConfig,
    PairwiseConfig,
    PolicyConfig,
    RayConfig,
    RunConfig,
    SchedulingConfig,
    StateConfig,
    TrackingConfig,
)
from .sources import (
    DataConfig,
    EndpointConfig,
    FeaturesConfig,
    JudgeConfig,
    LabelsConfig,
    LiveCandidate,
    LiveCandidateRef,
    LiveConfig,
    PythonSourceConfig,
    ReferenceConfig,
    ServeConfig,
)

__all__ = ["AggregateConfig", "BudgetConfig", "ConfigError", "CostsConfig", "DataConfig", "EndpointConfig", "FeaturesConfig",
           "JudgeConfig", "LabelsConfig", "LiveCandidate", "LiveCandidateRef", "LiveConfig", "ObjectiveConfig",
           "PairwiseConfig", "PolicyConfig", "PythonSourceConfig", "RayConfig", "ReferenceConfig", "RunConfig",
           "SchedulingConfig", "ServeConfig", "StateConfig", "TrackingConfig", "apply_overrides", "load_config",
           "load_plugins", "parse_config"]
