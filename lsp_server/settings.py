"""Typed server settings (section ``fastcoder``) parsed from LSP initializationOptions / configuration.

Settings arrive as untyped JSON from three places: ``initialize.initializationOptions``, the pushed
``workspace/didChangeConfiguration`` notification (either ``{"fastcoder": {...}}`` as VS Code's
``synchronize.configurationSection`` sends it, or a flat dict), and the pull request
``workspace/configuration`` (section ``fastcoder``). :func:`parse_settings` turns any of them into a
:class:`Settings`; an invalid value is replaced by the default and reported as a warning string that names
the setting, so the server can show it with ``window/showMessage`` and never crash.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

SECTION = "fastcoder"
METHODS = ("ar", "hf-prompt-lookup", "rest", "copyspec", "fastcoder", "sdsat", "fastcoder+sdsat")
# Methods that need a model fine-tuned with adaptive tokens (an sdsat.json beside its weights).
SDSAT_METHODS = ("sdsat", "fastcoder+sdsat")
# Methods whose drafts are sized by the verify-cost model c(n) and a learned acceptance estimator.
COST_SIZED_METHODS = ("fastcoder", "sdsat", "fastcoder+sdsat")
STOP_AT = ("line", "block")
DEVICE_PREFIXES = ("auto", "cpu", "cuda", "mps", "xpu")
#: Weight dtypes; auto = float32 on a CPU (exact), bfloat16/float16 on a GPU (engine.model.load_model).
DTYPES = ("auto", "float32", "bfloat16", "float16")
#: Where completions come from: the in-process model (``local``) or an OpenAI-compatible
#: ``/v1/completions`` endpoint (``openai``: vLLM, llama.cpp's server, Ollama; :mod:`lsp_server.backends`).
BACKENDS = ("local", "openai")
DEFAULT_ENDPOINT = "http://127.0.0.1:8000/v1"
# Settings whose change needs the endpoint client to be rebuilt (openai backend).
ENDPOINT_KEYS = ("backend", "endpoint", "endpoint_model", "model")
# Settings whose change needs the model and D_c to be reloaded in the background.
RELOAD_KEYS = ("model", "device", "dtype", "common_datastore")
# Settings whose change only needs new decoders (cheap, done at once).
DECODER_KEYS = ("method", "warm_documents")
# Settings whose change needs the repository datastores D_r to be rebuilt.
REINDEX_KEYS = ("repo_index", "exclude", "max_file_bytes")


def default_model_name(start: Path | None = None) -> str:
    """The model used when the ``model`` setting is empty.

    Order: env ``FASTCODER_MODEL``; ``../shared/models/tiny-py-coder`` next to the checkout (offline
    development); ``engine.DEFAULT_MODEL`` (a hub id). Never raises.
    """
    env = os.environ.get("FASTCODER_MODEL", "").strip()
    if env:
        return env
    here = Path(start) if start is not None else Path(__file__).resolve().parent.parent
    candidate = here.parent / "shared" / "models" / "tiny-py-coder"
    if candidate.is_dir():
        return str(candidate)
    try:
        from engine import DEFAULT_MODEL  # noqa: PLC0415 (engine import is heavy; only when needed)

        return str(DEFAULT_MODEL)
    except Exception:  # pragma: no cover - engine missing or broken
        return "Qwen/Qwen2.5-Coder-0.5B"


@dataclass(frozen=True)
class Settings:
    """Server settings with their defaults (names are the snake_case form of the camelCase JSON keys).

    backend: ``local`` or ``openai``; endpoint: the OpenAI-compatible base URL (``.../v1``); endpoint_model:
    the model name the endpoint serves ("" = the first of its ``/v1/models``); repo_id: sent as
    ``vllm_xargs.fastcoder_repo`` ("" = not sent, ``"auto"`` = the workspace folder's path).
    max_new_tokens / max_prompt_tokens are in tokens; max_prompt_tokens None means min(1024, model maximum).
    common_datastore is a path, ``"stdlib"`` or ``"none"``. exclude holds gitignore-style globs.
    """

    model: str = ""
    method: str = "fastcoder"
    max_new_tokens: int = 64
    max_prompt_tokens: int | None = None
    stop_at: str = "line"
    common_datastore: str = "stdlib"
    repo_index: bool = True
    exclude: tuple[str, ...] = ()
    device: str = "auto"
    dtype: str = "auto"
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_cached_documents: int = 32
    max_incremental_files: int = 200
    token_healing: bool = True
    warm_cache: bool = True
    warm_on_cursor: bool = True
    warm_chunk_tokens: int = 64
    type_through: bool = True
    warm_documents: int = 4
    deadline_ms: int = 0
    max_file_bytes: int = 1_000_000
    backend: str = "local"
    endpoint: str = DEFAULT_ENDPOINT
    endpoint_model: str = ""
    repo_id: str = ""

    def resolved_model(self) -> str:
        """The model name or path to load: the setting, else :func:`default_model_name`."""
        return self.model or default_model_name()

    def changed_keys(self, other: "Settings") -> set[str]:
        """Names of the fields whose value differs between ``self`` and ``other``."""
        return {f.name for f in dataclasses.fields(self) if getattr(self, f.name) != getattr(other, f.name)}


class _Invalid(ValueError):
    """A setting value that cannot be used; the message says what is expected."""


def _int_in(lo: int, hi: int) -> Callable[[Any], int]:
    def conv(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or not lo <= v <= hi:
            raise _Invalid(f"an integer in [{lo}, {hi}]")
        return int(v)

    return conv


def _float_in(lo: float, hi: float, lo_open: bool = False) -> Callable[[Any], float]:
    def conv(v: Any) -> float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (
            lo < float(v) <= hi if lo_open else lo <= float(v) <= hi)
        if not ok:
            raise _Invalid(f"a number in {'(' if lo_open else '['}{lo}, {hi}]")
        return float(v)

    return conv


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def conv(v: Any) -> str:
        if not isinstance(v, str) or v not in options:
            raise _Invalid("one of " + ", ".join(options))
        return v

    return conv


def _string(v: Any) -> str:
    if not isinstance(v, str):
        raise _Invalid("a string")
    return v.strip()


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Invalid("true or false")
    return v


def _globs(v: Any) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, (list, tuple)) or not all(isinstance(g, str) for g in v):
        raise _Invalid("a list of glob strings")
    return tuple(g for g in v if g.strip())


def _device(v: Any) -> str:
    if not isinstance(v, str) or not v.strip().split(":")[0] in DEVICE_PREFIXES:
        raise _Invalid("auto, cpu, cuda, cuda:N or mps")
    return v.strip()


def _common(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise _Invalid('a path, "stdlib" or "none"')
    return v.strip()


def _endpoint(v: Any) -> str:
    if not isinstance(v, str) or not v.strip().lower().startswith(("http://", "https://")):
        raise _Invalid("an http:// or https:// URL such as " + DEFAULT_ENDPOINT)
    return v.strip()


def _optional(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else conv(v)


# JSON key -> (dataclass field, converter)
_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "model": ("model", _string),
    "method": ("method", _choice(METHODS)),
    "maxNewTokens": ("max_new_tokens", _int_in(1, 4096)),
    "maxPromptTokens": ("max_prompt_tokens", _optional(_int_in(16, 1 << 20))),
    "stopAt": ("stop_at", _choice(STOP_AT)),
    "commonDatastore": ("common_datastore", _common),
    "repoIndex": ("repo_index", _bool),
    "exclude": ("exclude", _globs),
    "device": ("device", _device),
    "dtype": ("dtype", _choice(DTYPES)),
    "temperature": ("temperature", _float_in(0.0, 10.0)),
    "topP": ("top_p", _float_in(0.0, 1.0, lo_open=True)),
    "topK": ("top_k", _int_in(0, 1 << 20)),
    "seed": ("seed", _optional(_int_in(0, 2**63 - 1))),
    "maxCachedDocuments": ("max_cached_documents", _int_in(1, 4096)),
    "maxIncrementalFiles": ("max_incremental_files", _int_in(1, 1 << 20)),
    "tokenHealing": ("token_healing", _bool),
    "warmCache": ("warm_cache", _bool),
    "warmOnCursor": ("warm_on_cursor", _bool),
    "warmChunkTokens": ("warm_chunk_tokens", _int_in(8, 4096)),
    "typeThrough": ("type_through", _bool),
    "warmDocuments": ("warm_documents", _int_in(0, 256)),
    "deadlineMs": ("deadline_ms", _int_in(0, 600_000)),
    "maxFileBytes": ("max_file_bytes", _int_in(1024, 1 << 30)),
    "backend": ("backend", _choice(BACKENDS)),
    "endpoint": ("endpoint", _endpoint),
    "endpointModel": ("endpoint_model", _string),
    "repoId": ("repo_id", _string),
}


def section_of(raw: Any) -> Mapping[str, Any] | None:
    """The ``fastcoder`` settings inside ``raw``: ``raw["fastcoder"]`` when present, else ``raw`` itself when
    it is a flat dict with at least one known key, else None (nothing for us, e.g. another extension's push).
    A pulled ``workspace/configuration`` answer (a list/tuple with one item per section) is unwrapped first."""
    if isinstance(raw, (list, tuple)):
        raw = raw[0] if raw else None
    if hasattr(raw, "_asdict"):  # pygls' generic Object for untyped JSON
        raw = raw._asdict()
    if not isinstance(raw, Mapping):
        return None
    inner = raw.get(SECTION)
    if hasattr(inner, "_asdict"):
        inner = inner._asdict()
    if isinstance(inner, Mapping):
        return inner
    if any(k in _FIELDS for k in raw):
        return raw
    return None


def parse_settings(raw: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Parse untyped settings JSON over ``base`` (default: :class:`Settings` defaults).

    Returns (settings, warnings). Unknown keys are ignored; a key whose value is invalid keeps its value from
    ``base`` and adds a warning like ``'fastcoder.maxNewTokens: expected an integer in [1, 4096], got -3;
    using 64'``. A null value resets the key to its default. Never raises.
    """
    base = base or Settings()
    defaults = Settings()
    values: dict[str, Any] = {}
    warnings: list[str] = []
    section = section_of(raw) or {}
    for key, value in section.items():
        if key not in _FIELDS:
            continue
        name, conv = _FIELDS[key]
        if value is None and name not in ("max_prompt_tokens", "seed"):
            values[name] = getattr(defaults, name)
            continue
        try:
            values[name] = conv(value)
        except _Invalid as exc:
            kept = getattr(base, name)
            warnings.append(f"{SECTION}.{key}: expected {exc}, got {value!r}; using {kept!r}")
    return dataclasses.replace(base, **values), warnings
