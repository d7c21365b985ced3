"""``python -m certsel.cli``: the ``certsel`` command."""

import sys

from . import main

sys.exit(main())
