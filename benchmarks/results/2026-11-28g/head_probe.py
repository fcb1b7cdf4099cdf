"""What this folder's draft-head experiments share: tiny-py-coder, its output embedding, the packaged draft head as
torch tensors, D_c (the standard library), the installed packages' folder and a tree's depth-1 tokens."""
from pathlib import Path

import numpy as np
import torch

from engine import load_model
from engine.bench.cli import _load_common
from engine.draft_head import find_draft_head

ROOT = Path(__file__).resolve().parents[3]
SITE = ROOT / ".venv" / "lib" / "python3.11" / "site-packages"


class Probe:
    """``loaded``, ``E`` ((V, d) float32 output embedding), ``common`` (D_c); :meth:`head_logits`."""

    def __init__(self):
        self.loaded = load_model(str(ROOT.parent / "shared" / "models" / "tiny-py-coder"))
        self.E = self.loaded.model.get_output_embeddings().weight.detach().float()
        head = find_draft_head(self.loaded.model)
        self.w1, self.b1, self.w2, self.b2 = (torch.from_numpy(np.asarray(x, dtype=np.float32))
                                              for x in (head.w1, head.b1, head.w2, head.b2))
        self.common = _load_common(self.loaded, "stdlib")

    def head_logits(self, h: torch.Tensor) -> torch.Tensor:
        """(V,) the packaged head's logits for the token after the pending one, from the (d,) final hidden state of
        the row that chose it (Medusa's block, engine.draft_head.DraftHead)."""
        return (h + self.w2 @ torch.nn.functional.silu(self.w1 @ h + self.b1) + self.b2) @ self.E.T


def depth_one_tokens(tree) -> set[int]:
    """The token ids of a draft tree's depth-1 nodes (those hanging from the pending token)."""
    return {int(tree.tokens[i]) for i in range(tree.n_draft) if tree.parents[i] < 0}
