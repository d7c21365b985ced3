"""The commands: ``certsel run`` (job.py: a job from its config to its report and MLflow runs),
multi-task jobs (multitask.py) and the job's named, timed stages (stages.py). The top of
``orchestrator``: it uses the engine, the inputs and the outputs; nothing here is imported by them."""
