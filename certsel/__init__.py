"""certsel: certified selection of models, quantization configs and prompt templates."""

from certsel._version import __version__

from certsel.api import Result, audit, run  # noqa: E402  (light: the job's modules load when it runs)
from certsel.gates import GateResult, gate  # noqa: E402  (light, as above)

__all__ = ["GateResult", "Result", "__version__", "audit", "gate", "run"]
