"""certsel.workers: label sources and the per-candidate Ray actors.

Label sources implement :class:`~certsel.workers.contracts.LabelSource`: recorded losses
(:mod:`~certsel.workers.replay`), models behind OpenAI-compatible servers (:mod:`~certsel.workers.live`), a user's
Python function (:mod:`~certsel.workers.python_source`), each wrapped by the durable label log
(:mod:`~certsel.workers.labellog`). Candidates (:mod:`~certsel.workers.candidate`) hold a policy and a source; a
``CandidateWorker`` actor (:mod:`~certsel.workers.actor`) hosts one or several of them.
"""
