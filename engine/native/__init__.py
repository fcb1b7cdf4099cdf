"""Native (C) versions of the decoder's per-step drafting code, compiled on first use and loaded with ctypes.

Every decode step builds a draft tree (:func:`engine.tree_builder.build_draft_tree`) and a context copy
(:meth:`engine.context_match.SuffixMatchIndex.draft`); in Python they cost ~0.25 and ~0.15 ms of a
~7-15 ms CPU step, time a lossless decoder has to win back with accepted tokens. ``draft_tree.c`` gives
the same trees and ``context_copy.c`` the same drafts, bit for bit, in microseconds. ``small_gemm.c`` multiplies a few rows by a weight
matrix (the verify forward's linear layers; :mod:`engine.native.linear`, used by :mod:`engine.packed_linear`),
``tree_attention.c`` attends a few query rows to the KV cache under a tree mask (:mod:`engine.native.attention`,
used by :mod:`engine.native_attention`), ``decoder_layer.c`` runs a whole decoder layer over those rows with both
(:mod:`engine.native.layer`, used by :mod:`engine.lean_forward`), ``datastore.c`` makes a datastore search's suffix-array probes and reads
its continuations in one call each (:meth:`engine.datastore.Datastore.search`), and ``propose.c`` searches a fastcoder step's
cache, context copy and completion history and builds its tree in one call (:mod:`engine.native.propose`);
``draft_ahead.c`` drafts the next step's tree inside the verification's call (:mod:`engine.native.draft_ahead`).

The C files use no Python headers: it is compiled once per source version with the system's C compiler
(``$CC``, else ``cc``, else ``gcc``) into ``platformdirs.user_cache_dir("fastcoder")/native/<hash>/``
(``FASTCODER_CACHE_DIR`` overrides the user cache part) and loaded with :mod:`ctypes`. Without a compiler, or
with ``FASTCODER_NATIVE=0``, :func:`library` returns None and callers keep their Python code, which gives
the same results. Compile errors are logged once, never raised.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ..cache_paths import cache_root

log = logging.getLogger(__name__)

SOURCES = ("draft_tree.c", "draft_head.c", "small_gemm.c", "tree_attention.c", "decoder_layer.c", "datastore.c",
           "greedy.c", "propose.c", "draft_ahead.c", "context_copy.c", "kv_cache.c", "screened_head.c", "step.c")
#: -ffp-contract=off: no fused multiply-add, so every float equals the Python builder's.
CFLAGS = ("-O2", "-std=c99", "-shared", "-fPIC", "-ffp-contract=off")
#: Added when the compiler takes it: fc_gemm splits its panels over torch's threads (small_gemm.c). A compiler
#: without OpenMP builds the same library single-threaded.
OPENMP_FLAGS = ("-fopenmp",)
NATIVE_ENV = "FASTCODER_NATIVE"
#: Environment variable: extra compiler flags (space-separated; part of the library's version), for experiments
#: such as ``-DPF_HINT=_MM_HINT_NTA`` (small_gemm.c).
CFLAGS_ENV = "FASTCODER_NATIVE_CFLAGS"


def _cflags() -> tuple[str, ...]:
    """:data:`CFLAGS` and those of ``$FASTCODER_NATIVE_CFLAGS``."""
    return (*CFLAGS, *os.environ.get(CFLAGS_ENV, "").split())
#: The sources of the verify forward's kernels: what the measured c(n) curve depends on (:func:`forward_version`).
FORWARD_SOURCES = ("small_gemm.c", "tree_attention.c", "decoder_layer.c", "simd_math.h", "screened_head.c", "step.c")
#: Headers the sources include (part of the library's version, not compiled on their own).
HEADERS = ("simd_math.h", "propose.h", "indent_shift.h", "draft_head.h")

_state: dict[str, object] = {}


def cache_dir() -> Path:
    """Folder of compiled libraries: ``<user cache>/native``."""
    return cache_root() / "native"


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return name
    return None


def _build(out: Path, compiler: str) -> None:
    here = Path(__file__).resolve().parent
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        for extra in (OPENMP_FLAGS, ()):
            cmd = [compiler, *_cflags(), *extra, "-o", tmp, *(str(here / s) for s in SOURCES), "-lm"]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if done.returncode == 0:
                break
            if extra:
                log.info("building the native code without OpenMP (%s)", done.stderr.strip()[:200])
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()[:2000]}")
        os.replace(tmp, out)  # atomic: a concurrent process sees the whole library or none
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _configure(lib: ctypes.CDLL) -> None:
    i64, dbl, ptr = ctypes.c_int64, ctypes.c_double, ctypes.c_void_p
    lib.fc_build_sized_packed.restype = i64
    lib.fc_build_sized_packed.argtypes = [ptr, ptr]  # fc_build_sized's arguments in two arrays (native/tree.py)
    lib.fc_build_sized_parts.restype = i64  # the same from the sources' arrays (native/tree.py)
    lib.fc_build_sized_parts.argtypes = [ptr, ptr, ptr, ptr, i64, i64, i64, i64, i64]
    lib.fc_tree_stop_token_kept.restype = ctypes.c_int  # a row cut at a stop token keeps it (1) or not (0); A/B runs
    lib.fc_tree_stop_token_kept.argtypes = [ctypes.c_int]
    lib.fc_tree_inputs.restype = i64  # a draft tree's mask and positions (engine.draft_tree.DraftTree.forward_inputs)
    lib.fc_tree_inputs.argtypes = [ptr, i64, i64, ctypes.c_float, ptr, ptr]
    lib.fc_suffix_draft.restype = i64
    lib.fc_propose.restype = i64  # a fastcoder step's sources and tree in one call (engine/native/propose.py)
    lib.fc_propose.argtypes = [ptr, ptr, i64, i64, i64, i64]
    lib.fc_propose_retrieve.restype = i64  # the same after searching D_r and D_c (propose.c)
    lib.fc_propose_retrieve.argtypes = [ptr, ptr, i64, i64, i64, i64]
    lib.fc_verify_propose.restype = i64  # a greedy step's verification, then the next step's drafting (draft_ahead.c)
    lib.fc_verify_propose.argtypes = [ptr, ptr, i64, i64, i64, ptr, ptr, ptr, ptr]
    lib.fc_verify_propose_loop.restype = i64  # fastcoder steps back to back while Python has nothing to do between
    lib.fc_verify_propose_loop.argtypes = [ptr, ptr, i64, i64, i64, ptr, ptr, ptr, ptr, ptr]  # (draft_ahead.c)
    lib.fc_draft_ahead.restype = i64  # a generation's first tree drafted in the fields of the steps after (draft_ahead.c)
    lib.fc_draft_ahead.argtypes = [ptr, ptr, ptr]
    lib.fc_chain_extend.restype = i64  # a token buffer's occurrence chains (engine.history.TokenMirror)
    lib.fc_chain_extend.argtypes = [ptr, ptr, ptr, i64, i64, i64]
    lib.fc_suffix_draft.argtypes = [ptr, i64, i64, i64, dbl, dbl, i64, i64, ptr, ptr, ptr, ptr]
    lib.fc_gemm_supported.restype = ctypes.c_int
    lib.fc_gemm_supported.argtypes = []
    lib.fc_gemm.restype = None
    lib.fc_gemm.argtypes = [ptr, i64, i64, ptr, i64, ptr]
    lib.fc_gather_inputs.restype = ctypes.c_int  # a forward's embedding rows and rotary rows (engine.lean_forward)
    lib.fc_gather_inputs.argtypes = [ptr, i64, ptr, i64, i64, ptr, ptr, ptr, i64, i64, ptr, ptr, ptr]
    lib.fc_set_threads.restype = None
    lib.fc_set_threads.argtypes = [i64]  # fc_gemm's threads (engine.native.linear.sync_threads)
    lib.fc_gemm_pack.restype = None
    lib.fc_gemm_pack.argtypes = [ptr, i64, i64, ptr]
    lib.fc_head_hidden.restype = None  # the draft head's h' and lse_hat (engine.draft_head, draft_head.c)
    lib.fc_head_hidden.argtypes = [ptr, ptr, ptr, i64]
    lib.fc_head_step.restype = i64  # a decode step's draft-head work: learn, then the next h' (draft_head.c)
    lib.fc_head_step.argtypes = [ptr, ptr, ptr, i64, i64, i64, i64, i64, dbl]
    f32, cint = ctypes.c_float, ctypes.c_int
    lib.fc_fused_layer_supported.restype = cint
    lib.fc_fused_layer_supported.argtypes = [i64]
    lib.fc_fused_layer.restype = cint
    lib.fc_fused_layer.argtypes = [ptr, i64, i64, ptr, ptr, f32,                  # x, norms
                                   ptr, ptr, ptr, ptr, ptr, ptr, ptr, i64,        # panels, intermediate size
                                   i64, i64, i64, ptr, ptr,                       # heads, rotary
                                   ptr, ptr, i64, i64,                            # KV cache buffers
                                   ptr, cint, ptr, cint, f32]                     # mask, causal, scale
    lib.fc_fused_forward.restype = cint  # every layer, then the final norm (native/layer.py)
    lib.fc_fused_forward.argtypes = [ptr, ptr, i64, ptr, i64, i64, ptr, ptr, i64, ptr, cint, ptr, cint, ptr, dbl, ptr]
    lib.fc_sa_longest.restype = i64
    lib.fc_sa_longest.argtypes = [ptr, i64, ptr, i64, ctypes.c_int, ptr, ctypes.c_char_p, i64, i64, i64, i64, i64, i64,
                                  ptr]
    lib.fc_sa_rows.restype = i64
    lib.fc_sa_rows.argtypes = [ptr, i64, i64, ptr, ctypes.c_int, i64, i64, i64, i64, i64, ptr, ptr]
    lib.fc_rows_argmax.restype = None  # each row's argmax, numpy's rule (greedy.c)
    lib.fc_rows_argmax.argtypes = [ptr, i64, i64, ptr]
    lib.fc_gemm_argmax.restype = None  # fc_gemm, then fc_rows_argmax of its output (the LM head's greedy choice)
    lib.fc_gemm_argmax.argtypes = [ptr, i64, i64, ptr, i64, ptr, ptr]
    lib.fc_screen_supported.restype = ctypes.c_int  # the LM head's exact argmax by int8 screening (screened_head.c)
    lib.fc_screen_supported.argtypes = []
    lib.fc_screen_use.restype = ctypes.c_int
    lib.fc_screen_use.argtypes = [ctypes.c_int]
    lib.fc_screen_bytes.restype = i64
    lib.fc_screen_bytes.argtypes = [i64, i64]
    lib.fc_screen_kpad.restype = i64
    lib.fc_screen_kpad.argtypes = [i64]
    lib.fc_screen_pack.restype = ctypes.c_int
    lib.fc_screen_pack.argtypes = [ptr, i64, i64, ptr, ptr, ptr, ptr, ptr]
    lib.fc_screen_argmax.restype = i64
    lib.fc_screen_argmax.argtypes = [ptr, i64, i64, ptr, ptr, ptr, ptr, ptr, ptr, i64, ptr, ptr]
    lib.fc_greedy_step.restype = i64  # gather, every layer, final norm, screened argmax in one call (native/step.py)
    lib.fc_greedy_step.argtypes = [ptr, ptr, ptr, ptr, i64, i64, ptr, cint, ptr, ptr]
    lib.fc_greedy_tree_step.restype = i64  # the same from a draft tree's tokens and parents (native/step.py)
    lib.fc_greedy_tree_step.argtypes = [ptr, ptr, i64, ptr, ptr, i64, i64, ptr]
    lib.fc_greedy_tree_verify.restype = i64  # the same, then the greedy walk and the KV compaction (native/step.py)
    lib.fc_greedy_tree_verify.argtypes = [ptr, ptr, i64, ptr, ptr, ptr, i64, i64, ptr, ptr, ptr, ptr]
    lib.fc_greedy_tree_verify_learn.restype = i64  # the same, then the acceptance counts and hits (native/step.py)
    lib.fc_greedy_tree_verify_learn.argtypes = [ptr, ptr, i64, ptr, ptr, ptr, i64, i64, ptr, ptr, ptr, ptr, ptr]
    lib.fc_kv_move.restype = None  # the accepted nodes' KV rows into place (kv_cache.c)
    lib.fc_kv_move.argtypes = [ptr, i64, ptr, i64, i64]
    lib.fc_ds_search.restype = i64  # Datastore.search's match and MatchState in one call (datastore.c)
    lib.fc_ds_search.argtypes = [ptr, ptr, ptr, i64, i64, i64, i64, i64]
    lib.fc_gemm_use.restype = ctypes.c_int  # which kernels fc_gemm and fc_attention run (kernel_isa)
    lib.fc_gemm_use.argtypes = [ctypes.c_int]
    lib.fc_gemm_two_rows.restype = ctypes.c_int  # two rows alone: one panel at a time (1) or kern2x2 (0); A/B runs
    lib.fc_gemm_two_rows.argtypes = [ctypes.c_int]
    lib.fc_gemm_group_prefetch.restype = ctypes.c_int  # passes over a cached panel group prefetch the next (A/B)
    lib.fc_gemm_group_prefetch.argtypes = [ctypes.c_int]
    lib.fc_gemm_prefetch.restype = i64  # the AVX2 kernels' prefetch distance in lines (A/B runs); -1 only asks
    lib.fc_gemm_prefetch.argtypes = [i64]
    lib.fc_attention_use.restype = ctypes.c_int
    lib.fc_attention_use.argtypes = [ctypes.c_int]
    lib.fc_attention_kv_pf.restype = ctypes.c_int  # multi-row scores' key prefetch distance (blocks; -1 reads)
    lib.fc_attention_kv_pf.argtypes = [ctypes.c_int]
    lib.fc_attention_supported.restype = ctypes.c_int
    lib.fc_attention_supported.argtypes = []
    lib.fc_attention.restype = ctypes.c_int
    lib.fc_attention.argtypes = [ptr, ptr, ptr, ptr, ptr, ptr, i64, i64, i64, i64, i64, i64, ptr, ctypes.c_int,
                                 ptr, ctypes.c_int, ctypes.c_float, ptr]


def library() -> ctypes.CDLL | None:
    """The compiled library (built on the first call of a process if its cache has none), or None when
    disabled (``FASTCODER_NATIVE=0``), without a C compiler, or when the build failed (logged once)."""
    if "lib" in _state:
        return _state["lib"]  # type: ignore[return-value]
    lib = None
    if os.environ.get(NATIVE_ENV, "1").strip().lower() not in ("0", "false", "no", "off"):
        try:
            lib = _load()
        except Exception as err:  # noqa: BLE001  (any failure: the Python code serves)
            log.warning("native code unavailable, using Python and torch (same results, slower): %s", err)
    _state["lib"] = lib
    return lib


def version() -> str:
    """The loaded library's version: a hash (16 hex digits) of its C sources, flags and platform; "" when
    :func:`library` gives None. Results measured with the native kernels (the c(n) curve) are keyed by it."""
    return str(_state.get("version", "")) if library() is not None else ""


def forward_version() -> str:
    """:func:`version` of the forward kernels alone (:data:`FORWARD_SOURCES`): the c(n) curve's cache key, which a
    change to the drafting code should not invalidate; "" when :func:`library` gives None."""
    return str(_state.get("forward_version", "")) if library() is not None else ""


def _digest(names) -> str:
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in names:
        digest.update((here / name).read_bytes())
    digest.update(" ".join((*_cflags(), *OPENMP_FLAGS)).encode())
    digest.update(f"{platform.machine()}-{platform.system()}".encode())
    return digest.hexdigest()[:16]


def _load() -> ctypes.CDLL | None:
    _state["version"] = version_hash = _digest(SOURCES + HEADERS)
    _state["forward_version"] = _digest(FORWARD_SOURCES)
    out = cache_dir() / version_hash / "libfastcoder_native.so"
    if not out.exists():
        compiler = _compiler()
        if compiler is None:
            log.info("no C compiler found: drafting stays in Python")
            return None
        _build(out, compiler)
    lib = ctypes.CDLL(str(out))
    _configure(lib)
    kernel_isa(lib)  # $FASTCODER_ISA applied before the first product
    return lib


#: Environment variable: ``avx2`` makes the forward's few-row products (``fc_gemm``) and attention
#: (``fc_attention``) run their AVX2 kernels on a CPU with AVX-512 (the same bits; for tests and measurements);
#: anything else lets the CPU decide. The LM head's screen has its own (``FASTCODER_SCREEN``).
ISA_ENV = "FASTCODER_ISA"
_ISA: dict[str, str] = {}  # "isa": what kernel_isa chose for this process


def kernel_isa(lib) -> str:
    """The instruction set of the forward kernels in ``lib`` (the native library): ``"avx512"`` (AVX-512F and VL:
    products of 2-8 rows a register block, attention over shared keys two and four rows at a time) or ``"avx2"``,
    chosen once per process from :data:`ISA_ENV`; ``"none"`` where the CPU lacks AVX2 and FMA (the forward
    kernels do not serve there). Both give the same bits; on this project's CPU the AVX-512 kernels take 8-26%
    less time in the products at 2-8 rows and 12-18% less in the attention at 4-12 rows (small_gemm.c,
    tree_attention.c)."""
    if "isa" not in _ISA:
        want = 1 if os.environ.get(ISA_ENV, "").strip().lower() == "avx2" else 0
        if lib.fc_gemm_supported():
            gemm, attention = int(lib.fc_gemm_use(want)), int(lib.fc_attention_use(want))
            _ISA["isa"] = "avx512" if gemm == 2 and attention == 2 else "avx2"
        else:
            _ISA["isa"] = "none"
    return _ISA["isa"]


def packed_kernels_isa(packing) -> str | None:
    """:func:`kernel_isa` where ``packing`` (:mod:`engine.packed_linear`'s report of a loaded model) runs the native
    few-row kernel, else None (another kernel or device, nothing packed, no native library): what the c(n) curve's
    key, the benchmark's JSON and the server's status name."""
    if not packing or getattr(packing, "kernel", None) != "native":
        return None
    lib = library()
    return kernel_isa(lib) if lib is not None else None


@contextmanager
def forward_kernels(isa: str):
    """Run the enclosed forwards on ``isa``'s kernels (``"avx2"``; ``"avx512"`` where the CPU has it), then go back to
    :func:`kernel_isa`'s choice: the benchmark's kernel ablations, paired per task with the default. The same bits
    either way. The choice is process-wide (not for a server with several model threads). Raises ValueError for
    another name; without the native library it does nothing."""
    if isa not in ("avx2", "avx512"):
        raise ValueError(f"unknown instruction set {isa!r}: avx2 or avx512")
    lib = library()
    if lib is None or kernel_isa(lib) == "none":
        yield
        return
    code = 1 if isa == "avx2" else 0
    lib.fc_gemm_use(code), lib.fc_attention_use(code)
    try:
        yield
    finally:
        back = 1 if kernel_isa(lib) == "avx2" else 0
        lib.fc_gemm_use(back), lib.fc_attention_use(back)
