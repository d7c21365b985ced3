"""The engine: the one round loop (driver.py), the plan, selection and pairwise ranking rounds, the driver's checkpoints
(state.py), where candidates run (runtime.py, hosts.py) and the model servers (servers.py). It writes the result model
(``results/``) and reads the inputs; it imports no output."""
