"""Before the first label: the job's data through its label-source kind, the feasibility check and certsel plan."""
