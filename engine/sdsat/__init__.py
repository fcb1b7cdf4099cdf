"""SDSAT: speculative decoding with semantic adaptive tokens (Liu & Zhu, SDSAT, 2024).

- :mod:`engine.sdsat.config`: the adaptive-token metadata saved beside a fine-tuned model
  (``sdsat.json``), which the decoder reads to know which token id is the adaptive token.
- :mod:`engine.sdsat.train`: the fine-tuning recipe (section 2.2 and appendix A).
"""

from .config import SDSAT_CONFIG_FILE, NotAnSdsatModel, SdsatConfig, load_sdsat_config, save_sdsat_config

__all__ = ["SDSAT_CONFIG_FILE", "NotAnSdsatModel", "SdsatConfig", "load_sdsat_config", "save_sdsat_config"]
