"""Replay (healed tasks): fastcoder as is vs fastcoder whose drafted line-end tokens (those holding a newline) are
replaced by EOS (what a FIM model emits where the middle joins a suffix that begins on the next line)."""
import sys, collections
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
import numpy as np
from measure_drafting import replay_from_command_line, replay
from engine import SpeculativeDecoder
from engine.bench import runner
from engine.bench.tasks import heal_task
from engine.stops import one_line, stop_tokens
args, (loaded, tasks, refs, common, repos) = replay_from_command_line(sys.argv[1:])
eos_set = set(loaded.eos_token_ids); EOS = min(eos_set)
nl = stop_tokens(["\n"], loaded)
ar = SpeculativeDecoder(loaded, method="ar")
healed = []
for task in tasks:
    h = heal_task(task, loaded.token_bytes)
    r = ar.generate(list(h.prompt_ids), max_new_tokens=args.max_new_tokens, stop=h.stop, constraint=h.healed or None)
    ref = list(r.token_ids) + ([EOS] if r.finish_reason == "eos" else [])
    if len(ref) >= 2:
        healed.append((h, ref))

def substitute(tree):
    n = len(tree)
    if not n or tree.n_adaptive:
        return tree
    toks = tree.tokens.copy(); par = tree.parents
    keep = np.ones(n, bool); seen = set()
    for i in range(n):
        p = int(par[i])
        if p >= 0 and (not keep[p] or toks[p] == EOS):
            keep[i] = False; continue
        if int(toks[i]) in nl:
            if (p, EOS) in seen:
                keep[i] = False; continue
            toks[i] = EOS; seen.add((p, EOS))
    tree.tokens = toks; tree._children = None
    return tree.keep(keep)

for variant in ("as-is", "eos-at-line-end"):
    runner._ESTIMATORS.clear(); runner._SUFFIX_CACHES.clear(); runner._HISTORIES.clear()
    steps = 0
    for h, ref in healed:
        dec = runner.make_decoder(loaded, "fastcoder", repos[h.task_id], common)
        drafter = dec._make_drafter(dec.new_cache(), True, one_line(h.stop))
        if variant != "as-is":
            real = drafter.propose
            drafter.propose = lambda ctx, real=real: substitute(real(ctx))
        res = replay(drafter, dec.estimator, h.prompt_ids, ref, [0], loaded.eos_token_ids)
        steps += len(res["accepted"])
    print(variant, "decode forwards", steps, "tasks", len(healed))
