"""The load's probe part alone, in one process: the model loaded without packing, then packing, the lean forward and
the native attention installed as engine.model.load_model does, with the probes timed (FASTCODER_PROBE_CACHE=0) or
read from the cache, alternating; ms per round.

Usage: HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-28j/probe_parts.py [rounds]"""
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from engine import load_model  # noqa: E402
from engine.lean_forward import install_lean_forward  # noqa: E402
from engine.native_attention import install_native_attention  # noqa: E402
from engine.packed_linear import pack_linear_weights, packing_kernel  # noqa: E402


def install(model, key):
    t0 = time.perf_counter()
    packing = pack_linear_weights(model, kernel=packing_kernel(), probe_key=key)
    t1 = time.perf_counter()
    lean = install_lean_forward(model)
    t2 = time.perf_counter()
    attention = install_native_attention(model, probe_key={**key, "packing": [
        packing.kernel, packing.max_rows, len(packing.layers), bool(packing.huge_page_bytes)],
        "lean_forward": lean == ""})
    t3 = time.perf_counter()
    return (t1 - t0) * 1e3, (t3 - t2) * 1e3, packing.probe_cached, attention.probe_cached, packing.max_rows, \
        attention.max_rows


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    path = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
    key = {"model": os.path.realpath(path), "params": 0, "dtype": str(torch.float32)}
    results = {False: [], True: []}
    for r in range(rounds):
        for cached in (False, True) if r % 2 == 0 else (True, False):
            os.environ["FASTCODER_PROBE_CACHE"] = "1" if cached else "0"
            model = load_model(path, pack_weights=False).model
            pack_ms, att_ms, pc, ac, lr, ar = install(model, key)
            results[cached].append(pack_ms + att_ms)
            print(f"round {r} cache={cached}: packing {pack_ms:.0f} ms (cached {pc}, rows {lr}), attention "
                  f"{att_ms:.0f} ms (cached {ac}, rows {ar})", flush=True)
    for cached, values in results.items():
        print(f"cache={cached}: median {statistics.median(values):.0f} ms, range {min(values):.0f}-{max(values):.0f}")


if __name__ == "__main__":
    main()
