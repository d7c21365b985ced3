"""Release 0.1's home of the commands, the engine and the result model: each module here is an
alias of its new home (``commands/``, ``engine/``, ``results/``) that warns once (see ``_moved.py``)."""
