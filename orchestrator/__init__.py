"""certsel.orchestrator: the Ray driver, selection rounds, MLflow tracking and reports.

Until the distributed driver lands, the single-process selection used by the ``certsel``
command is :func:`certsel.orchestrator.local.replicated_selection`
(vectorised over replications; ``reps=1`` is a single job).
"""
