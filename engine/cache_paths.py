"""Where fastcoder caches what it builds or measures: one user cache folder, overridable.

``platformdirs.user_cache_dir("fastcoder")``, or ``$FASTCODER_CACHE_DIR`` when set. Its subfolders:
``datastores`` (D_c, :mod:`engine.common_datastore`), ``verify_cost`` (c(n) curves,
:mod:`engine.cost_model`), ``probes`` (the load-time timing probes' results, :mod:`engine.probe_cache`), ``native``
(the compiled drafting library, :mod:`engine.native`).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "FASTCODER_CACHE_DIR"


def cache_root() -> Path:
    """The user cache folder of fastcoder (``$FASTCODER_CACHE_DIR`` overrides; not created here)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs  # noqa: PLC0415

    return Path(platformdirs.user_cache_dir("fastcoder"))
