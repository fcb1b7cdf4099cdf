"""Adaptive-token metadata of an SDSAT model, saved as ``sdsat.json`` beside the model's weights.

An SDSAT model is an ordinary causal LM fine-tuned so that a run of identical *adaptive tokens*
appended after the context predicts the next tokens in parallel (SDSAT, section 2.2; one identical
adaptive token as recommended in appendix B). The decoder needs the adaptive token's id and the
largest window L it was trained with; both live in this small JSON file, written by the training
recipe and read when a model is loaded.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

SDSAT_CONFIG_FILE = "sdsat.json"


class NotAnSdsatModel(ValueError):
    """The model has no SDSAT metadata (no ``sdsat.json``), so it cannot draft with adaptive tokens."""


@dataclass(frozen=True)
class SdsatConfig:
    """What the decoder must know about an SDSAT fine-tune.

    Attributes:
        adaptive_token_id: vocabulary id of the (single, identical) adaptive token.
        adaptive_token: its text form, e.g. ``"<|reserved_0|>"`` (for people and sanity checks).
        max_window: L, the longest run of adaptive tokens seen in training (tokens); drafting with
            k > L adaptive tokens is allowed but untrained.
        base_model: the model the fine-tune started from (path or hub id), for provenance.
    """

    adaptive_token_id: int
    adaptive_token: str = ""
    max_window: int = 8
    base_model: str = ""

    def __post_init__(self):
        if not isinstance(self.adaptive_token_id, int) or self.adaptive_token_id < 0:
            raise ValueError(f"adaptive_token_id must be a non-negative int, got {self.adaptive_token_id!r}")
        if not isinstance(self.max_window, int) or self.max_window < 1:
            raise ValueError(f"max_window must be a positive int, got {self.max_window!r}")


def save_sdsat_config(model_dir: str | Path, config: SdsatConfig) -> Path:
    """Write ``sdsat.json`` into ``model_dir`` (created if missing); returns its path."""
    path = Path(model_dir) / SDSAT_CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(config), indent=2) + "\n", encoding="utf-8")
    return path


def load_sdsat_config(model_dir: str | Path | None) -> SdsatConfig | None:
    """The SDSAT metadata of the model in ``model_dir``, or None when it has none.

    Raises:
        ValueError: ``sdsat.json`` exists but is not valid JSON or lacks a valid ``adaptive_token_id``.
    """
    if model_dir is None:
        return None
    path = Path(model_dir) / SDSAT_CONFIG_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        known = {k: data[k] for k in ("adaptive_token_id", "adaptive_token", "max_window", "base_model") if k in data}
        return SdsatConfig(**known)
    except (json.JSONDecodeError, TypeError, KeyError) as err:
        raise ValueError(f"{path}: not a valid SDSAT metadata file ({err})") from err
