"""The commands: ``certsel run`` (job.py), multi-task jobs (tasks_job.py), the job lifecycle (lifecycle.py), timed
stages (stages.py). The top layer:
it uses the engine, inputs and outputs; none of them imports it."""
