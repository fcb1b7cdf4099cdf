"""Replay with the drafter's context in file order for FIM prompts: MODE=so (suffix then prefix) or p (prefix only)."""
import os, sys
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
import replay_methods as R
from engine.fim import detect_fim_template
MODE = os.environ.get("MODE", "so")
real = R.replay
state = {}
def reorder(ids):
    pre, suf, mid = state["ids"]
    if pre not in ids or suf not in ids or mid not in ids:
        return ids
    a, b, c = ids.index(pre), ids.index(suf), ids.index(mid)
    head, P, S = ids[:a], ids[a + 1:b], ids[b + 1:c]
    return head + (S + P if MODE == "so" else P)
def patched(drafter, est, prompt_ids, ref, *a, **k):
    if "ids" not in state:
        import engine.bench.runner as run
        state["ids"] = detect_fim_template(state["tok"])[1]
    return real(drafter, est, reorder(list(prompt_ids)), ref, *a, **k)
R.replay = patched
from transformers import AutoTokenizer
state["tok"] = AutoTokenizer.from_pretrained("../shared/models/tiny-py-coder")
sys.argv = ["replay_methods.py"] + sys.argv[1:]
R.main()
