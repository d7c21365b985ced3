"""Running a job: the job's command (job.py), the engine and its rounds, the plan, the driver's records and checkpoints, and certsel select (replicated.py)."""
