# Experiment script (2026-11-25 night, benchmarks/README.md "Update 2026-11-25 (night)"): run from the repository root.
"""Experiment: run every decoder forward on a worker thread pinned to core 0, the Python loop pinned to core 1."""
import sys, os, threading, runpy, queue
import engine.decoder as DEC
os.sched_setaffinity(0, {1})
jobs = queue.SimpleQueue()
class Job:
    __slots__ = ("f", "a", "k", "r", "e", "done")
    def __init__(self, f, a, k): self.f, self.a, self.k, self.r, self.e, self.done = f, a, k, None, None, threading.Event()
def worker():
    os.sched_setaffinity(0, {0})
    import torch
    torch.set_num_threads(1)
    while True:
        j = jobs.get()
        try:
            with torch.inference_mode():
                j.r = j.f(*j.a, **j.k)
        except BaseException as e:
            j.e = e
        j.done.set()
threading.Thread(target=worker, daemon=True).start()
def remote(f):
    def w(*a, **k):
        j = Job(f, a, k); jobs.put(j); j.done.wait()
        if j.e is not None: raise j.e
        return j.r
    return w
for n in ("tree_forward", "decode_one_token"):
    setattr(DEC, n, remote(getattr(DEC, n)))
sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
