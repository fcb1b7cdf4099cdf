"""Loading a Hugging Face causal LM and its tokenizer for speculative decoding.

The decoder needs exactness (its output must equal the model's own greedy output), so on CPU the
model runs in float32 by default; on an accelerator bfloat16 (or float16 where bf16 is missing).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

log = logging.getLogger(__name__)

#: Hub id used when neither ``--model`` nor ``FASTCODER_MODEL`` names a model.
DEFAULT_MODEL = "Qwen/Qwen2.5-Coder-1.5B"
MODEL_ENV = "FASTCODER_MODEL"
#: Set to 1 to keep cuDNN in PyTorch's attention (SDPA) backends on a GPU (see :func:`avoid_per_shape_attention_plans`).
CUDNN_SDPA_ENV = "FASTCODER_CUDNN_SDPA"


class ModelLoadError(RuntimeError):
    """The model or tokenizer could not be loaded; ``str(err)`` is one line meant for a person."""


def default_model_name() -> str:
    """The model to use when none is given: ``$FASTCODER_MODEL`` if set, else :data:`DEFAULT_MODEL`."""
    return os.environ.get(MODEL_ENV) or DEFAULT_MODEL


@dataclass
class LoadedModel:
    """A causal LM ready for decoding.

    Attributes:
        model: a ``transformers`` ``PreTrainedModel`` in eval mode.
        tokenizer: its tokenizer, or None when a test drives the model with token ids only.
        device: where the model's weights live.
        dtype: the weights' dtype (float32 on CPU by default, for exactness).
        name: the path or hub id it came from.
        sdsat: the model's SDSAT adaptive-token metadata (``sdsat.json`` beside the weights,
            :mod:`engine.sdsat.config`), or None for a model not fine-tuned with adaptive tokens.
        packing: which linear layers got packed weights for few-row products
            (:class:`engine.packed_linear.PackReport`), or None when packing was not tried.
        attention: whether the native few-row attention serves the model
            (:class:`engine.native_attention.AttentionReport`), or None when it was not tried.
        lean_forward: why the lean decode forward (:mod:`engine.lean_forward`) was not installed, ""
            when it was, None when it was not tried.
        cuda_graphs: why a GPU model's decode steps do not replay CUDA graphs (:mod:`engine.cuda_graphs`), ""
            when they do, None when it was not tried (a CPU model).
    """

    model: torch.nn.Module
    tokenizer: object | None
    device: torch.device
    dtype: torch.dtype
    name: str = ""
    sdsat: "SdsatConfig | None" = None
    packing: "PackReport | None" = None
    attention: "AttentionReport | None" = None
    lean_forward: str | None = None
    cuda_graphs: str | None = None
    _token_info: "TokenInfo | None" = field(default=None, repr=False)
    _token_bytes: object | None = field(default=None, repr=False)

    @property
    def cuda_graphs_status(self) -> bool | str | None:
        """For reports (the bench JSON, ``fastcoder/status``, the verify-cost key): True where the decode steps replay
        CUDA graphs, the reason they do not, None where it was not tried (a CPU model)."""
        return True if self.cuda_graphs == "" else self.cuda_graphs

    @property
    def vocab_size(self) -> int:
        """Rows of the output embedding (>= the tokenizer's vocabulary)."""
        return int(self.model.config.vocab_size)

    @property
    def max_positions(self) -> int:
        """Longest sequence (tokens) the model accepts: ``max_position_embeddings`` or n_positions."""
        cfg = self.model.config
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(cfg, key, None)
            if isinstance(value, int) and value > 0:
                return value
        return 2048

    @property
    def eos_token_ids(self) -> set[int]:
        """Token ids that end a generation (from the generation config, the config and the tokenizer)."""
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.model.config, self.tokenizer):
            value = getattr(source, "eos_token_id", None) if source is not None else None
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return ids

    @property
    def token_info(self) -> "TokenInfo":
        """Per-token facts used by drafters (lazily computed once per model)."""
        if self._token_info is None:
            self._token_info = TokenInfo.from_tokenizer(self.tokenizer, self.vocab_size)
        return self._token_info

    @property
    def token_bytes(self):
        """:class:`engine.healing.TokenBytes` of the tokenizer, for token healing (computed once per
        model: ~15 ms for 8k tokens, ~0.3 s for 152k). Raises ValueError without a tokenizer."""
        if self._token_bytes is None:
            from .healing import TokenBytes  # noqa: PLC0415

            if self.tokenizer is None:
                raise ValueError("a constraint needs a tokenizer")
            self._token_bytes = TokenBytes.from_tokenizer(self.tokenizer, self.vocab_size)
        return self._token_bytes


@dataclass
class TokenInfo:
    """Per-token-id flags for FastCoder's skip-token rule (FastCoder, Sec. III-C), and the special tokens.

    Attributes:
        ends_with_newline_ws: bool array (vocab_size,): the token's text contains a newline and only
            spaces/tabs follow the last newline (the context then sits at the start of a line).
        whitespace_only: bool array (vocab_size,): the token's text is non-empty spaces/tabs only.
        special: the tokenizer's special token ids (FIM sentinels, BOS/EOS, padding). The datastores hold
            source text, so a context ending in one (a FIM prompt's first decode steps) has no continuation
            there: :class:`engine.drafters.FastCoderDrafter` does not search D_r and D_c for it.
        indent: the tokenizer's newline-and-spaces tokens (:class:`engine.indent_shift.IndentTable`), by which the
            context copy re-indents a copy from a line of another width; None without a tokenizer.
    """

    ends_with_newline_ws: np.ndarray
    whitespace_only: np.ndarray
    special: frozenset = frozenset()
    indent: object = None

    @classmethod
    def from_tokenizer(cls, tokenizer, vocab_size: int) -> "TokenInfo":
        from .indent_shift import IndentTable  # noqa: PLC0415

        ends = np.zeros(vocab_size, dtype=bool)
        ws = np.zeros(vocab_size, dtype=bool)
        indent = None
        if tokenizer is not None:
            n = min(vocab_size, len(tokenizer))
            texts = tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=False)
            indent = IndentTable.from_texts(texts, vocab_size)
            for i, text in enumerate(texts):
                if "\n" in text:
                    ends[i] = text.rsplit("\n", 1)[1].strip(" \t") == ""
                elif text and text.strip(" \t") == "":
                    ws[i] = True
        from .healing import special_ids  # noqa: PLC0415  (as token_bytes: healing imports the verifier)

        special = frozenset(i for i in special_ids(tokenizer) if 0 <= i < vocab_size)
        return cls(ends, ws, special, indent)

    def at_line_start(self, context: np.ndarray) -> bool:
        """True when the next token would be the first non-whitespace token of a line.

        Args:
            context: 1-D int array of token ids.
        """
        for tok in context[::-1][:64]:
            tok = int(tok)
            if tok < 0 or tok >= len(self.ends_with_newline_ws):
                return False
            if self.ends_with_newline_ws[tok]:
                return True
            if not self.whitespace_only[tok]:
                return False
        return False


def _pick_device(device: str | torch.device) -> torch.device:
    if str(device) != "auto":
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _pick_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype != "auto":
        try:
            return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
                    "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}[dtype]
        except KeyError:
            raise ModelLoadError(f"unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16") from None
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def avoid_per_shape_attention_plans(device: torch.device, dtype: torch.dtype) -> bool:
    """Take cuDNN out of PyTorch's scaled-dot-product-attention backends for a half-precision GPU model.

    PyTorch (2.11 on an H200) sends bfloat16/float16 attention to cuDNN first, and cuDNN builds an execution plan
    for every new (query length, key length) shape. Decoding meets a new key length at every step (and a verify
    forward a new query length too), so each forward paid a plan build: tiny-py-coder decoded at 28-32 ms per
    token in bfloat16 against 5.3 ms in float32 on the same H200, while one forward at a repeated shape took
    3.5 ms (benchmarks/results/2026-11-26g). Flash and memory-efficient attention take any shape at no set-up
    cost. The setting is process-wide (``torch.backends.cuda.enable_cudnn_sdp(False)``), which suits the
    server and the CLI that own their process; ``FASTCODER_CUDNN_SDPA=1`` keeps cuDNN.

    Returns True when it turned cuDNN attention off, False when nothing was changed (CPU, float32, the
    variable set, or a torch without the switch).
    """
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return False
    if os.environ.get(CUDNN_SDPA_ENV, "").lower() in ("1", "true", "yes"):
        return False
    switch = getattr(torch.backends.cuda, "enable_cudnn_sdp", None)
    if switch is None:
        return False
    switch(False)
    log.info("cuDNN attention off (%s=1 keeps it): it builds a plan for every new sequence length", CUDNN_SDPA_ENV)
    return True


def _hub_reachable(timeout_s: float = 2.0) -> bool:
    """Whether the Hugging Face hub host resolves (DNS only) and offline mode is not forced."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    import socket
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    previous = socket.getdefaulttimeout()
    try:
        socket.setdefaulttimeout(timeout_s)
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False
    finally:
        socket.setdefaulttimeout(previous)


def load_model(name_or_path: str | None = None, device: str | torch.device = "auto",
               dtype: str | torch.dtype = "auto", pack_weights: bool = True) -> LoadedModel:
    """Load a causal LM and its tokenizer with the transformers Auto classes.

    Args:
        name_or_path: a local folder or a hub id; None means :func:`default_model_name`.
        device: ``"auto"`` (cuda, then mps, then cpu) or a torch device string.
        dtype: ``"auto"`` (float32 on CPU for exactness, bfloat16/float16 on an accelerator) or a name.
        pack_weights: on a CPU in float32, give the linear layers packed weights for the verify forward's
            few-row products (:func:`engine.packed_linear.pack_linear_weights`, within
            ``$FASTCODER_PACKED_WEIGHTS_MB``) and the native few-row attention
            (:func:`engine.native_attention.install_native_attention`), each where a probe at load finds
            it faster on this machine, and the lean decode forward (:mod:`engine.lean_forward`, bit-identical
            outputs); outputs are unchanged up to float rounding.

    Returns:
        A :class:`LoadedModel` in eval mode.

    Raises:
        ModelLoadError: the model cannot be found or fetched (offline hub id, missing folder, bad
            files); the message names ``--model`` and ``FASTCODER_MODEL``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = name_or_path or default_model_name()
    dev = _pick_device(device)
    torch_dtype = _pick_dtype(dtype, dev)
    looks_local = name.startswith((".", "/", "~")) or os.sep in name and Path(name).expanduser().exists()
    path = Path(name).expanduser()
    if looks_local and not path.exists():
        raise ModelLoadError(f"model folder {name!r} does not exist; pass --model or set {MODEL_ENV} "
                             "to a local model folder or a hub id")
    source = str(path) if path.exists() else name
    # A hub id: use the local HF cache when it has the files; go online only when the hub resolves,
    # so an offline machine fails at once instead of after a minute of retries.
    local_only = not path.exists() and not _hub_reachable()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, local_files_only=local_only)
    except (OSError, ValueError, ImportError) as err:
        if local_only:
            raise ModelLoadError(
                f"model {name!r} is not in the local Hugging Face cache and the hub cannot be reached "
                f"(offline?); pass --model /path/to/model-folder or set {MODEL_ENV}") from err
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelLoadError(
            f"could not load model {name!r} ({first}); if this machine is offline, download it "
            f"elsewhere and pass --model /path/to/folder or set {MODEL_ENV}") from err
    model.to(dev)
    model.eval()
    avoid_per_shape_attention_plans(dev, torch_dtype)
    packing = attention = lean = None
    if pack_weights and dev.type == "cpu" and torch_dtype == torch.float32:
        from .lean_forward import install_lean_forward  # noqa: PLC0415
        from .native_attention import install_native_attention  # noqa: PLC0415
        from .packed_linear import pack_linear_weights, packing_kernel  # noqa: PLC0415

        # the probes' timings are cached per machine and model as the c(n) curve is (engine.probe_cache): ~0.8 s of
        # every start, and the same kernels at every load as the curve was measured with
        probe_key = {"model": os.path.realpath(source) if path.exists() else source,
                     "params": int(sum(p.numel() for p in model.parameters())), "dtype": str(torch_dtype)}
        packing = pack_linear_weights(model, kernel=packing_kernel(), probe_key=probe_key)
        lean = install_lean_forward(model)
        attention = install_native_attention(model, probe_key={  # its probe times the forward the decoder will run
            **probe_key, "packing": [packing.kernel, packing.max_rows, len(packing.layers),
                                     bool(packing.huge_page_bytes)], "lean_forward": lean == ""})
    graphs = None
    if dev.type == "cuda":
        from .cuda_graphs import install_cuda_graphs  # noqa: PLC0415

        graphs = install_cuda_graphs(model)
        log.info("CUDA graphs: %s", graphs or "on")
    log.info("loaded %s on %s (%s)", name, dev, torch_dtype)
    return LoadedModel(model=model, tokenizer=tokenizer, device=dev, dtype=torch_dtype, name=name,
                       sdsat=_load_sdsat(source, local_only), packing=packing,
                       attention=attention, lean_forward=lean, cuda_graphs=graphs)


def _load_sdsat(source: str, local_only: bool):
    """The SDSAT metadata beside the model (a folder, or a hub repository's ``sdsat.json``), or None."""
    from .sdsat.config import SDSAT_CONFIG_FILE, load_sdsat_config  # noqa: PLC0415

    if Path(source).is_dir():
        return load_sdsat_config(source)
    try:
        from transformers.utils import cached_file  # noqa: PLC0415

        found = cached_file(source, SDSAT_CONFIG_FILE, local_files_only=local_only,
                            _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
    except (OSError, ValueError) as err:
        log.debug("no %s for %s: %s", SDSAT_CONFIG_FILE, source, err)
        return None
    return load_sdsat_config(Path(found).parent) if found else None
