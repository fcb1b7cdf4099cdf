"""The depth-1 candidates of fastcoder's trees along the model's greedy output, for the draft-head experiments here
(exp_hydra_feature.py, exp_normaliser.py): engine.bench.fit_head.collect_depth_one's replay, yielding each step's
candidates with the hidden state and pending token a head would read, so that any number of heads can score them."""
import numpy as np
import torch

from engine.acceptance import AcceptanceEstimator
from engine.bench import fit_head
from engine.bench.fit_prior import replay_drafts
from engine.draft_head import DepthOneFeature, DraftHead, output_embedding


def cell_candidates(loaded, common, repo, kind, tasks=10, seed=0, max_new_tokens=128):
    """Per replayed step with depth-1 candidates: (h, pending, tokens, q, accepted): the (d,) final hidden state of
    the row that chose the pending token, that token, the candidates' tokens, the engine's estimates and whether each
    was the model's next token. The trees are the engine's own (a frozen recorder with the identity calibration)."""
    emb = output_embedding(loaded.model)
    d, r = emb.shape[1], 128
    recorder = DepthOneFeature(DraftHead(np.zeros((r, d), np.float32), np.zeros(r, np.float32),
                                         np.zeros((d, r), np.float32), np.zeros(d, np.float32),
                                         np.zeros(d, np.float32), 0.0), emb, learning_rate=0.0)
    estimator = AcceptanceEstimator()
    estimator.depth_one = recorder
    state = {}

    def on_task(prompt, reference):
        with torch.inference_mode():
            state["h"] = fit_head._hidden_and_choice(loaded.model, prompt + reference)[0]

    def before_step(context):
        recorder.set_hidden(state["h"][len(context) - 2])  # enabled, the identity calibration: q unchanged
        state["at"], state["pending"] = len(context) - 2, int(context[-1])

    with torch.inference_mode():
        for step in replay_drafts(loaded, repo, kind, tasks, seed, max_new_tokens, estimator, common, on_task,
                                  before_step):
            seen = int(recorder.seen_tokens[0])
            if seen:
                tokens = recorder.seen_tokens[1:1 + seen].tolist()
                yield (state["h"][state["at"]], state["pending"], tokens,
                       [float(recorder.seen_values[2 * j]) for j in range(seen)],
                       [t == step.target[0] for t in tokens])
            recorder.seen_tokens[0] = 0
