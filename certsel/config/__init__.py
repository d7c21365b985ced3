"""Job configuration for ``certsel run CONFIG.yaml``: a validated pydantic schema.

Unknown keys and bad values raise :class:`ConfigError` with a one-line message naming the key (``policy.betting:
Input should be 'up' or 'wsr'``). Relative data paths are resolved against the config file's directory.

Modules: :mod:`~certsel.config.schema` (:class:`RunConfig`, validated against the registries), :mod:`~certsel.config.sections`
(its sections), :mod:`~certsel.config.checks` (the checks across sections),
:mod:`~certsel.config.sources` (label sources), :mod:`~certsel.config.loading` (YAML, ``--set`` overrides, plugins,
paths), :mod:`~certsel.config.base` (the error, the strict base model). Example: ``examples/quantization.yaml``.
"""

from .base import ConfigError
from .loading import apply_overrides, load_config, load_plugins, parse_config
from .schema import RunConfig
from .sections import (
    AggregateConfig,
    BudgetConfig,
    CostsConfig,
    ObjectiveConfig,
    PairwiseConfig,
    PolicyConfig,
    RayConfig,
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
