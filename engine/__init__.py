"""fastcoder engine: lossless retrieval-based speculative decoding for code LLMs.

Public API (DESIGN.md, "Contracts")::

    loaded = load_model("path/or/hub-id", device="auto", dtype="auto")
    decoder = SpeculativeDecoder(loaded, method="fastcoder", repo_datastore=None, common_datastore=None)
    result = decoder.generate(prompt, max_new_tokens=128)   # .text, .token_ids, .stats

No LSP code lives here; the language server (lsp_server/) calls into this package.
"""

from .decoder import METHODS, GenerationResult, SpeculativeDecoder
from .model import DEFAULT_MODEL, LoadedModel, ModelLoadError, default_model_name, load_model

__all__ = ["DEFAULT_MODEL", "METHODS", "GenerationResult", "LoadedModel", "ModelLoadError",
           "SpeculativeDecoder", "default_model_name", "load_model"]
