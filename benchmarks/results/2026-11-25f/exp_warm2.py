# Experiment script (2026-11-25 night, benchmarks/README.md "Update 2026-11-25 (night)"): run from the repository root.
import sys, time, runpy, collections, copy
import numpy as np
import engine.drafters as D
a1=[];a2=[]
f = D.FastCoderDrafter.propose
def w(self, ctx):
    t=time.perf_counter(); r=f(self, ctx); t1=time.perf_counter()
    st = self.rng.getstate()
    f(self, ctx); t2=time.perf_counter()
    self.rng.setstate(st)
    a1.append(t1-t); a2.append(t2-t1); return r
D.FastCoderDrafter.propose = w
import atexit
@atexit.register
def rep():
    print(f"first med {np.median(a1)*1e6:.0f} mean {np.mean(a1)*1e6:.0f} us; second med {np.median(a2)*1e6:.0f} mean {np.mean(a2)*1e6:.0f} us")
sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
