"""``python -m engine.bench``: the benchmark's command line (same as ``fastcoder bench``)."""

import sys

from .cli import main

sys.exit(main())
