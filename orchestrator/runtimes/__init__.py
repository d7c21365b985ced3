"""Release 0.1's home of the engine's hosts and servers: each module here is an alias of its new
home in ``engine/`` that warns once (see ``_moved.py``)."""
