"""The result model: the driver's per-candidate records (records.py) and the multi-task
combination (tasks.py). Written by the engine, read by the outputs; imports only the inputs."""
