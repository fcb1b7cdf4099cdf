"""The oracle replay (benchmarks/replay_methods.py) on *healed* tasks, with the drafter's context in the FIM layout
(as the decoder gives it) or in file order (the suffix part, then the kept prefix: the text before the cursor leads
into the generated tokens). Each task is healed as the server heals it (engine.bench.heal_task) and its reference is
`ar`'s constrained greedy answer (its first token spells the removed bytes: the pending token after the prefill).
Prints one line per (layout, method): decode forwards, accepted length, mean tree, predicted speedup without the
drafting time. Arguments: replay_methods.py's (--repo, --task-kind, --tasks, ...)."""
import dataclasses, sys
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
from measure_drafting import replay_from_command_line
import replay_methods as R
from engine import SpeculativeDecoder
from engine.bench.tasks import heal_task
from engine.cost_model import load_or_measure_verify_cost
from engine.fim import detect_fim_template

args, (loaded, tasks, refs, common, repos) = replay_from_command_line(sys.argv[1:])
pre, suf, mid = detect_fim_template(loaded.tokenizer)[1]
ar = SpeculativeDecoder(loaded, method="ar")
healed, hrefs = [], {}
for task in tasks:
    h = heal_task(task, loaded.token_bytes)
    r = ar.generate(list(h.prompt_ids), max_new_tokens=args.max_new_tokens, stop=h.stop, constraint=h.healed or None)
    hrefs[h.task_id] = list(r.token_ids) + ([min(loaded.eos_token_ids)] if r.finish_reason == "eos" else [])
    healed.append(h)


def file_order(task):
    ids = list(task.prompt_ids)
    a, b, c = ids.index(pre), ids.index(suf), len(ids) - 1
    return dataclasses.replace(task, prompt_ids=ids[:a] + ids[b + 1:c] + ids[a + 1:b])


cost = load_or_measure_verify_cost(loaded, None)
for layout, ts in (("fim", healed), ("file-order", [file_order(t) for t in healed])):
    for method in ("suffix", "fastcoder"):
        r = R.replay_method(loaded, method, ts, hrefs, repos, common, cost, None, False)
        print(layout, method, r["steps"], r["accepted_length"], r["mean_tree"], r["predicted_speedup_without_drafting"])
