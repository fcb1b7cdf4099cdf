"""The model's load with the load-time probes timed (FASTCODER_PROBE_CACHE=0) against read from the probe cache,
each in a fresh process, alternating; prints one JSON line per load.

Usage: HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-28j/load_probes.py [rounds]"""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHILD = r'''
import json, time, sys
t0 = time.perf_counter()
import engine
t1 = time.perf_counter()
from engine import load_model
from engine.probe_cache import native_rows
loaded = load_model(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_engine_s": round(t1 - t0, 3), "load_model_s": round(t2 - t1, 3),
                  "native_rows": native_rows(loaded)}))
'''


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    model = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
    for r in range(rounds):
        for cached in (False, True) if r % 2 == 0 else (True, False):
            env = {**os.environ, "FASTCODER_PROBE_CACHE": "1" if cached else "0"}
            out = subprocess.run([sys.executable, "-c", CHILD, model], env=env, cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.strip().splitlines()[-1]
            print(json.dumps({"round": r, "probe_cache": cached, **json.loads(out)}), flush=True)


if __name__ == "__main__":
    main()
