"""Per-step replay of fastcoder vs suffix on a task set: where do the forwards go?"""
import sys, json, collections
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
from measure_drafting import replay_from_command_line, replay, accepted_path
from engine.bench import runner
from engine.stops import one_line

args, (loaded, tasks, refs, common, repos) = replay_from_command_line(sys.argv[1:])
tok = loaded.tokenizer
rows = {}
for method in ("suffix", "fastcoder"):
    runner._ESTIMATORS.clear(); runner._SUFFIX_CACHES.clear(); runner._HISTORIES.clear()
    per = []
    for task in tasks:
        ref = refs[task.task_id]
        if len(ref) < 2:
            continue
        dec = runner.make_decoder(loaded, method, repos[task.task_id], common)
        cache = dec.new_cache() if runner.METHOD_SPECS[method][0] in runner._CACHED_METHODS else None
        drafter = dec._make_drafter(cache, True, one_line(task.stop))
        steps = []
        def on_step(tree, path, steps=steps):
            steps.append((tree.n_draft, len(path)))
        r = replay(drafter, dec.estimator, task.prompt_ids, ref, [0], loaded.eos_token_ids, on_step=on_step)
        per.append((task.task_id, ref, steps))
    rows[method] = per
sf, fc = rows["suffix"], rows["fastcoder"]
tot = collections.Counter()
for (tid, ref, s1), (_, _, s2) in zip(sf, fc):
    print(f"{tid}  len {len(ref)}  {tok.decode(ref)!r}")
    print("   suffix   ", s1)
    print("   fastcoder", s2)
    tot["suffix_steps"] += len(s1); tot["fc_steps"] += len(s2)
    tot["suffix_first_acc"] += s1[0][1] if s1 else 0; tot["fc_first_acc"] += s2[0][1] if s2 else 0
    tot["suffix_first_size"] += s1[0][0] if s1 else 0; tot["fc_first_size"] += s2[0][0] if s2 else 0
    tot["fc_zero_steps"] += sum(1 for n, a in s2 if a == 0); tot["suffix_zero_steps"] += sum(1 for n, a in s1 if a == 0)
print(dict(tot))
