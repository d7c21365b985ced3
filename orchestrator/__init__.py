"""certsel.orchestrator: the driver, selection procedures, MLflow tracking, reports and audits.

``certsel run`` is :func:`certsel.orchestrator.commands.job.execute`; the driver
(:func:`certsel.orchestrator.engine.driver.run_job`) runs candidates on Ray actors (or in-process) under a procedure
from :data:`PROCEDURES` (new ones: subclass :class:`Procedure`, add with :func:`register_procedure`).
"""

__all__ = ["PROCEDURES", "Procedure", "get_procedure", "register_procedure"]


def __getattr__(name):  # on first use: `certsel show` prints a certificate without importing the statistics
    if name in __all__:
        from certsel.policies import procedures

        return getattr(procedures, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
