import json,math,sys
cells=[f"{k}_{r}" for k in ("function","fim-line","fim-block") for r in ("jinja2","pluggy","pygls")]
def g(t,c,k="predicted_speedup"): return json.load(open(f"benchmarks/results/2026-11-28c/replay/{t}_{c}.json"))["results"][0][k]
base=sys.argv[1]
for t in sys.argv[2:]:
    rs=[g(t,c)/g(base,c) for c in cells]
    print(t, [round(x,3) for x in rs], round(math.exp(sum(map(math.log,rs))/len(rs)),4),
          "acc", [round(g(t,c,"accepted_length")/g(base,c,"accepted_length"),3) for c in cells])
