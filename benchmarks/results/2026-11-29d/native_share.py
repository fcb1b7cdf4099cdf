"""Share of fastcoder's decode time inside the native verify(+propose) calls: bench in-process (fastcoder only), calls
timed. Usage: native_share.py KIND REPO (FASTCODER_STEP_LOOP=0: one call a step, as before 329c21d)."""
import sys, time, json, collections, sysconfig, tempfile, os
sys.path.insert(0, ".")
from engine import cli
from engine.native import step as S
acc = collections.defaultdict(float); cnt = collections.Counter()
real_init = S.GreedyStep.__init__
def init(self, lib, *a, **k):
    real_init(self, lib, *a, **k)
    if getattr(lib, "_timed", False):
        return
    for name in ("fc_verify_propose", "fc_verify_propose_loop", "fc_greedy_step", "fc_greedy_tree_step", "fc_greedy_tree_verify", "fc_greedy_tree_verify_learn"):
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue
        def wrap(*args, _fn=fn, _n=name):
            t = time.perf_counter(); r = _fn(*args); acc[_n] += time.perf_counter() - t; cnt[_n] += 1; return r
        setattr(lib, name, wrap)
    lib._timed = True
S.GreedyStep.__init__ = init
if os.environ.get("DETAIL") == "1":  # each piece of the step's Python timed too (adds ~1 us a wrapper)
    def timed(cls, name, label=None):
        real = getattr(cls, name); label = label or cls.__name__ + "." + name
        def f(*a, **k):
            t = time.perf_counter(); r = real(*a, **k); acc[label] += time.perf_counter() - t; cnt[label] += 1; return r
        setattr(cls, name, f)
    from engine.native import draft_ahead as DA
    from engine import drafters as D, decoder as DEC
    for n in ("next_tree", "draft_first", "ready", "observed", "drafting_s", "first_source"):
        timed(DA.DraftAhead, n)
    timed(D.FastCoderDrafter, "observe_path"); timed(D.FastCoderDrafter, "propose")
    timed(DEC.SpeculativeDecoder, "_feed_head")
    timed(S.BoundVerify, "verify_draft")
    for n in ("_stale", "_learned", "_learn_args", "_walked_here"):
        timed(S.BoundVerify, n)
    for n in ("_scratch", "_verified"):
        timed(S.GreedyStep, n)
    timed(DA.DraftAhead, "builder_fields"); timed(DA.DraftAhead, "history_len")
    _st = S.sync_threads
    def _sync(lib):
        t = time.perf_counter(); r = _st(lib); acc["sync_threads"] += time.perf_counter() - t; cnt["sync_threads"] += 1; return r
    S.sync_threads = _sync
    import engine.generation as G0
    for n in ("_verifiable", "commit", "_learn", "_end_before_step", "push"):
        timed(G0.Generation, n)
import engine.generation as G
real_ts = G.Generation.tree_step
def tree_step(self, pending):
    a0 = acc["fc_verify_propose"] + acc["fc_verify_propose_loop"]
    steps0 = len(self.accepted_lengths)
    t = time.perf_counter(); r = real_ts(self, pending); dt = time.perf_counter() - t
    acc["tree_step"] += dt; cnt["tree_step"] += 1
    acc["tree_step_native"] += acc["fc_verify_propose"] + acc["fc_verify_propose_loop"] - a0
    cnt["steps"] += len(self.accepted_lengths) - steps0
    return r
G.Generation.tree_step = tree_step
real_dec = G.Generation._decode
def _decode(self, pending):
    t = time.perf_counter(); r = real_dec(self, pending); acc["decode_" + ("tree" if self.drafter else "plain")] += time.perf_counter() - t; return r
G.Generation._decode = _decode
OUT = os.path.join(tempfile.mkdtemp(), "bench.json")
site = sysconfig.get_paths()["purelib"]
kind, repo = sys.argv[1], sys.argv[2]
cli.main(["bench", "--model", "../shared/models/tiny-py-coder", "--repo", f"{site}/{repo}", "--common", "stdlib",
          "--tasks", "10", "--max-new-tokens", "128", "--seed", "0", "--threads", "1", "--task-kind", kind,
          "--methods", "fastcoder", "--no-headroom", "--repeats", "2", "--json", OUT])
m = json.load(open(OUT))["methods"]["fastcoder"]
print({k: round(m[k], 4) for k in ("forward_passes", "decode_ms", "step_retrieval_share", "step_other_share")})
print({k: (cnt[k], round(acc[k] * 1000, 2)) for k in acc})
outside = acc["tree_step"] - acc["tree_step_native"]
print(f"fastcoder: {cnt['steps']} steps in {cnt['tree_step']} tree_step calls, {acc['tree_step'] * 1e3:.1f} ms, "
      f"{acc['tree_step_native'] * 1e3:.1f} of them in the native calls: {outside / cnt['steps'] * 1e6:.0f} us of Python "
      f"a step ({outside / acc['tree_step']:.1%})")
