"""Experiment: replay_methods.py with the completion history pre-filled with the model's output on other packages
(the parts written by build_output_store.py --parts), instead of starting empty.

    WARM_PARTS=/tmp/s18/parts WARM_MAX_TOKENS=131072 PYTHONPATH=$PWD ... replay_warm_history.py <replay_methods args>
"""
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import engine.history as history  # noqa: E402

TAIL = 32
_Base = history.CompletionHistory


class WarmHistory(_Base):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("max_tokens", int(os.environ.get("WARM_MAX_TOKENS", 1 << 17)))
        kwargs.update(json.loads(os.environ.get("WARM_KW", "{}")))
        super().__init__(*args, **kwargs)
        for part in sorted(Path(os.environ["WARM_PARTS"]).glob("*.npy")):
            for doc in np.load(part, allow_pickle=True).tolist():
                doc = list(doc)
                self.add(doc[:TAIL], doc[TAIL:])


history.CompletionHistory = WarmHistory
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import replay_methods  # noqa: E402

sys.exit(replay_methods.main())
