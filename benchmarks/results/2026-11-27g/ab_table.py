"""The A/B table of this folder's runs: per cell, fastcoder against the variant in the same JSON (ms per token, decode
ms, drafting per step in steps, drafting per completion with the prefill phase's, forward per step, accepted length).
Usage: python benchmarks/results/2026-11-27g/ab_table.py VARIANT FILE.json..."""
import json
import sys

variant = sys.argv[1]
for f in sys.argv[2:]:
    m = json.load(open(f))["methods"]
    a, b = m["fastcoder"], m[variant]
    row = [f.split("/")[-1][:-5]]
    for k, scale, fmt in (("ms_per_token", 1, "%.3f"), ("decode_ms", 1, "%.0f"), ("step_retrieval_ms_per_step", 1e3, "%.0f"),
                          ("step_retrieval_share", 100, "%.1f%%"), ("retrieval_ms", 1, "%.1f"),
                          ("retrieval_prefill_ms", 1, "%.1f"), ("forward_ms_per_step", 1, "%.3f"),
                          ("mean_accepted_length", 1, "%.2f")):
        row.append(k + " " + fmt % (a[k] * scale) + " / " + fmt % (b[k] * scale))
    row.append("lossless %s/%s" % (a["lossless"], b["lossless"]))
    print(" | ".join(row))
