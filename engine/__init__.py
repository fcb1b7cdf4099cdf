"""fastcoder engine: lossless retrieval-based speculative decoding for code LLMs.

Public API (DESIGN.md, "Contracts")::

    loaded = load_model("path/or/hub-id", device="auto", dtype="auto")
    decoder = SpeculativeDecoder(loaded, method="fastcoder", repo_datastore=None, common_datastore=None)
    result = decoder.generate(prompt, max_new_tokens=128)   # .text, .token_ids, .stats

No LSP code lives here; the language server (lsp_server/) calls into this package. Names are
imported lazily, so ``from engine.datastore import Datastore`` does not load torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "METHODS": "decoder", "GenerationResult": "decoder", "SpeculativeDecoder": "decoder",
    "DEFAULT_MODEL": "model", "LoadedModel": "model", "ModelLoadError": "model",
    "default_model_name": "model", "load_model": "model",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
