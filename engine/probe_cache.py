"""The load-time timing probes' results, cached per machine, model and settings, as the c(n) curve is.

Two choices at a CPU model's load come from timing probes: up to how many rows the native few-row products serve
(:mod:`engine.packed_linear`, ~0.2 s) and up to how many query rows the native attention does
(:mod:`engine.native_attention`, ~0.6 s: the model's own forward, timed against ``sdpa``). Timed at every start,
they were 0.7-0.9 s of the language server's 11-12 s wait for its first completion on this project's 2-core CPU
(``benchmarks/results/2026-11-28j``), and a probe
timed while another job ran could pick other kernels than the load before it, under the same cached c(n) curve
(:mod:`engine.cost_model`). Each result is kept in ``<cache root>/probes/<kind>-<digest>.json``
(:func:`engine.cache_paths.cache_root`) under a key that holds everything it depends on: the caller's part (the
model, the weight's shape, the packing chosen) and :func:`machine_key` (the CPU, torch's threads, the forward
kernels' version and instruction set). Correctness checks are never cached: only timings are, and only a clear
result (:func:`cached_row_limit`: the native kernel no slower at every probed row count): another job's load during a
probe can make either side look slower, so a lower limit (or no native kernel at all) is timed again at the next
load instead of being made permanent.

``$FASTCODER_PROBE_CACHE=0`` times the probes at every load (and writes nothing); deleting the folder does it once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from .cache_paths import cache_root

log = logging.getLogger(__name__)

#: Environment variable: ``0`` times the probes at every load instead of reading cached results.
PROBE_CACHE_ENV = "FASTCODER_PROBE_CACHE"
#: Version of the stored files; a change makes every cached probe run again.
FORMAT = 1


def probe_cache_dir() -> Path:
    """Folder of cached probe results: ``<cache root>/probes`` (not created here)."""
    return cache_root() / "probes"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform  # noqa: PLC0415

    return platform.processor() or platform.machine()


def device_name(device) -> str:
    """The model of the processor ``device`` (a ``torch.device`` or its string) runs on: the GPU's name for a CUDA
    device (``torch.cuda.get_device_name``), else the CPU's (``/proc/cpuinfo``'s model name, or
    ``platform.processor()``) and its logical CPU count, e.g. ``"AMD EPYC x2"``. A cache folder shared between
    machines (a home directory on NFS) then keeps one timing per machine."""
    device = torch.device(device)
    if device.type == "cuda":
        try:
            return torch.cuda.get_device_name(device)
        except (RuntimeError, AssertionError):  # no driver, or a CPU-only build
            return "cuda"
    return f"{_cpu_name()} x{os.cpu_count() or 0}"


def machine_key() -> dict:
    """What any timing probe on this machine depends on: the CPU's name and count, torch's thread count, and the
    native forward kernels' version (:func:`engine.native.forward_version`: their C sources and flags) and
    instruction set (:func:`engine.native.kernel_isa`); "" for the last two without the native library."""
    from . import native  # noqa: PLC0415

    lib = native.library()
    return {"cpu": _cpu_name(), "cpus": os.cpu_count() or 0, "threads": int(torch.get_num_threads()),
            "forward": native.forward_version(), "isa": native.kernel_isa(lib) if lib is not None else ""}


def enabled() -> bool:
    """False where ``$FASTCODER_PROBE_CACHE`` is ``0``."""
    return os.environ.get(PROBE_CACHE_ENV, "").strip() != "0"


def cached_probe(kind: str, key: dict, measure: Callable[[], dict], keep: Callable[[dict], bool] | None = None,
                 folder: str | os.PathLike | None = None) -> tuple[dict, bool]:
    """The stored result of probe ``kind`` for ``key`` plus :func:`machine_key`, else ``measure()``'s, stored.

    Args:
        kind: the probe's name (a file-name prefix: letters, digits, ``-``, ``_``).
        key: what the result depends on beyond the machine; JSON-serialisable.
        measure: runs the probe; returns a JSON-serialisable dict (its int keys come back as strings from a
            stored file: the caller converts them).
        keep: which measured results are stored (default all); the others are returned and timed again at the next
            load (a result another job's load may have spoiled is not made permanent).
        folder: where results are kept (default :func:`probe_cache_dir`).

    Returns:
        ``(result, from_cache)``. A missing, unreadable or mismatching file, or ``$FASTCODER_PROBE_CACHE=0``, runs
        the probe; the file is written to a temporary and renamed into place. Never raises for cache problems
        (logged); ``measure``'s own exceptions propagate.
    """
    if not enabled():
        return measure(), False
    full = {"kind": kind, "format": FORMAT, **key, "machine": machine_key()}
    text = json.dumps(full, sort_keys=True, default=str)
    path = Path(folder) if folder is not None else probe_cache_dir()
    path = path / f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    try:
        data = json.loads(path.read_text())
        if json.dumps(data.get("key"), sort_keys=True, default=str) == text and isinstance(data.get("result"), dict):
            return data["result"], True
    except FileNotFoundError:
        pass
    except (OSError, ValueError, TypeError) as exc:
        log.warning("probe cache %s unusable (%s); probing again", path, exc)
    result = measure()
    if keep is not None and not keep(result):
        return result, False
    try:
        body = json.dumps({"key": json.loads(text), "result": result})
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w") as fh:
            fh.write(body)
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError) as exc:
        log.warning("could not cache the %s probe at %s: %s", kind, path, exc)
    return result, False


def cached_row_limit(kind: str, key: dict, probe: Callable[[], tuple[int, dict]],
                     full_rows: int) -> tuple[int, dict, bool]:
    """A native kernel's row limit through :func:`cached_probe`: ``probe()`` gives ``(max_rows, {rows: timings})``;
    a limit of ``full_rows`` (the kernel no slower at every probed row count) is kept, a lower one is timed again at
    the next load. Returns ``(max_rows, {rows (int): timings}, from_cache)``."""

    def measure() -> dict:
        rows, timings = probe()
        return {"max_rows": int(rows), "probe_ms": {str(k): v for k, v in timings.items()}}

    result, cached = cached_probe(kind, key, measure, keep=lambda res: res["max_rows"] == full_rows)
    return int(result["max_rows"]), {int(k): v for k, v in result["probe_ms"].items()}, cached


def native_rows(loaded) -> dict | None:
    """Up to how many rows a loaded model's native products (``linear``) and native attention (``attention``)
    serve, and whether each limit's timings came from this cache (``probe_cached``), for ``fastcoder/status`` and the
    benchmark's JSON; None where neither was tried (another device or dtype, or packing turned off)."""
    packing, attention = getattr(loaded, "packing", None), getattr(loaded, "attention", None)
    if packing is None and attention is None:
        return None
    return {"linear": packing.max_rows if packing is not None and packing.kernel == "native" else 0,
            "attention": attention.max_rows if attention is not None and attention.installed else 0,
            "probe_cached": {"linear": bool(getattr(packing, "probe_cached", False)),
                             "attention": bool(getattr(attention, "probe_cached", False))}}
