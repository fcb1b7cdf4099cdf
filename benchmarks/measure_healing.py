"""Token healing on and off at mid-word cursors: how often the suggestion is what the user then typed.

For N seeded positions inside identifiers of real third-party files (never the standard library:
tiny-py-coder's training set), the cursor is put k characters into a word (1 <= k < len(word)); the
server's own prompt builder and post-processing make the FIM prompt and the single-line suggestion,
with and without token healing, and the decoder (fastcoder method, greedy) completes it. Reported:

- exact-prefix acceptance: the suggestion is non-empty and the true rest of the line starts with it,
- word completed: the suggestion starts with the rest of the word (what "accept word" takes),
- mean matched characters: leading characters of the suggestion equal to what the user then typed,
- empty suggestions.

    python benchmarks/measure_healing.py --positions 200 [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODEL = ROOT.parent / "shared" / "models" / "tiny-py-coder"
PACKAGES = ("jinja2", "pluggy", "pygls", "click", "attr", "pathspec")


def positions(count: int, seed: int) -> list[tuple[str, int]]:
    """(file text, cursor offset) pairs inside identifiers, seeded."""
    rng = random.Random(seed)
    files = []
    for pkg in PACKAGES:
        spec = importlib.util.find_spec(pkg)
        if spec and spec.submodule_search_locations:
            files += sorted(Path(list(spec.submodule_search_locations)[0]).rglob("*.py"))
    out = []
    while len(out) < count:
        text = rng.choice(files).read_text(encoding="utf-8", errors="replace")
        words = [m for m in re.finditer(r"(?<![\w.])[A-Za-z_]\w{3,}", text) if m.start() > 200]
        if not words:
            continue
        word = rng.choice(words)
        out.append((text, word.start() + rng.randint(1, len(word.group()) - 1)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--positions", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    from engine import SpeculativeDecoder, load_model
    from lsp_server.postprocess import CursorContext, generation_stop, postprocess, strip_healed
    from lsp_server.prompt import build_fim_prompt

    torch.set_num_threads(1)
    loaded = load_model(str(MODEL), device="cpu")
    decoder = SpeculativeDecoder(loaded, method="fastcoder")
    rows = {"healing on": [], "healing off": []}
    for text, offset in positions(args.positions, args.seed):
        prefix, suffix = text[:offset], text[offset:]
        ctx = CursorContext.from_split(prefix, suffix)
        rest_of_line = ctx.line_suffix
        rest_of_word = re.match(r"\w*", rest_of_line).group()
        for name, heal in (("healing on", decoder.token_bytes), ("healing off", None)):
            prompt = build_fim_prompt(loaded.tokenizer, prefix, suffix, 1024, heal=heal)
            res = decoder.generate(prompt.token_ids, max_new_tokens=32, stop=generation_stop("line", ctx),
                                   constraint=prompt.healed)
            shown = postprocess(strip_healed(res.text, prompt.healed), ctx, "line") or ""
            matched = next((i for i, (a, b) in enumerate(zip(shown, rest_of_line)) if a != b),
                           min(len(shown), len(rest_of_line)))
            rows[name].append({"exact_prefix": bool(shown) and rest_of_line.startswith(shown),
                               "matched_chars": matched,
                               "word": bool(shown) and shown.startswith(rest_of_word),
                               "empty": not shown, "healed": bool(prompt.healed)})
    report = {}
    for name, items in rows.items():
        n = len(items)
        report[name] = {"positions": n,
                        "exact_prefix_acceptance": round(sum(r["exact_prefix"] for r in items) / n, 3),
                        "word_completed": round(sum(r["word"] for r in items) / n, 3),
                        "mean_matched_chars": round(sum(r["matched_chars"] for r in items) / n, 2),
                        "empty": round(sum(r["empty"] for r in items) / n, 3),
                        "healed_prompts": sum(r["healed"] for r in items)}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
