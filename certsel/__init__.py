"""certsel: certified selection of models, quantization configs and prompt templates."""

from certsel._version import __version__

from certsel.api import Result, audit, run  # noqa: E402  (light: the job's modules load when it runs)

__all__ = ["Result", "__version__", "audit", "run"]
