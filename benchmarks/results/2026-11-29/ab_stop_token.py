"""A/B inside one bench run: trees without stop-token nodes (this commit: `fastcoder`, `suffix`) against trees that keep
a stop token as a leaf (the rule before it: `fastcoder-keepstop`, `suffix-keepstop`, with `fc_tree_stop_token_kept(1)`
and the previous `prune_after_stop` around each of their generations), interleaved per task.
Usage: as `python -m engine bench ...` with `--methods ar,suffix,suffix-keepstop,fastcoder,fastcoder-keepstop`."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-11-27i"))
from ab_kernel import run_with  # noqa: E402

import engine.generation as generation  # noqa: E402
from engine import native  # noqa: E402
from engine.bench import runner  # noqa: E402

lib = native.library()
runner.METHOD_SPECS["fastcoder-keepstop"] = runner.METHOD_SPECS["fastcoder"]
runner.METHOD_SPECS["suffix-keepstop"] = runner.METHOD_SPECS["suffix"]
new_prune = generation.prune_after_stop


def old_prune(tree, stop_tokens):
    """prune_after_stop before this commit: only the stop tokens' descendants dropped (DraftTree.keep drops a node
    whose parent is dropped), the stop tokens kept."""
    stops = np.zeros(max(int(tree.tokens.max(initial=0)) + 1, 1), dtype=bool)
    ids = [t for t in (stop_tokens if isinstance(stop_tokens, (set, frozenset)) else np.flatnonzero(stop_tokens))
           if t < len(stops)]
    stops[ids] = True
    if tree.n_adaptive or not len(tree):
        return tree
    parents = tree.parents
    return tree.keep((parents < 0) | ~stops[tree.tokens[np.maximum(parents, 0)]])


def switch(method):
    old = bool(method and method.endswith("-keepstop"))
    lib.fc_tree_stop_token_kept(1 if old else 0)
    generation.prune_after_stop = old_prune if old else new_prune


run_with(switch)
