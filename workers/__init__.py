"""certsel.workers: label sources and the per-candidate Ray actors.

The replay source over recorded loss tables lives in :mod:`certsel.workers.replay`; the Ray
actors and the OpenAI-compatible (vLLM) source arrive with the driver and live-evaluation
work.
"""
