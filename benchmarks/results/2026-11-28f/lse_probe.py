"""The draft heads' linear log-normaliser: how far lse_hat = lse_w . h' + b is from the exact logsumexp, and what
other cheap fits would give (a per-pending-token bias, [h', E[pending]], [h', SiLU(a)], [h', SiLU(a), h'^2]).
Usage: .venv/bin/python benchmarks/results/2026-11-28f/lse_probe.py (1 thread; ~3 minutes)."""
import random, sys
from pathlib import Path
import numpy as np, torch
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
torch.set_num_threads(1)
from engine import load_model
from engine.bench import fit_head
from engine.draft_head import DraftHead
loaded = load_model(str(ROOT.parent / 'shared' / 'models' / 'tiny-py-coder'))
E = loaded.model.get_output_embeddings().weight.detach().float()
files = fit_head.standard_library_files(); random.Random(7).shuffle(files)
H, X, Y = fit_head.training_pairs(loaded, files[:40], seed=7)
for path in (HERE / 'hydra-head.npz', HERE / 'medusa-head.npz'):
    head = DraftHead.load(path)
    T = torch.from_numpy(head.pending_table(E.numpy())) if head.w1e is not None else None
    w1, b1, w2, b2 = (torch.from_numpy(a) for a in (head.w1, head.b1, head.w2, head.b2))
    a = H @ w1.T + b1 + (T[X] if T is not None else 0)
    hp = H + torch.nn.functional.silu(a) @ w2.T + b2
    lse = torch.logsumexp(hp @ E.T, -1)
    hat = hp @ torch.from_numpy(head.lse_w) + head.lse_b
    r = (lse - hat).double()
    n = len(r); half = n // 2
    # per-pending-token bias fitted on the first half, scored on the second
    sums = torch.zeros(8192, dtype=torch.float64).index_add_(0, X[:half], r[:half])
    cnt = torch.zeros(8192, dtype=torch.float64).index_add_(0, X[:half], torch.ones(half, dtype=torch.float64))
    bias = sums / (cnt + 5.0)
    r2 = r[half:] - bias[X[half:]]
    # linear in [h', E[pending]] refit
    D = torch.cat([hp, E[X], torch.ones(n, 1)], 1).double()
    sol = torch.linalg.lstsq(D[:half], lse[:half, None].double()).solution[:, 0]
    r3 = lse[half:].double() - D[half:] @ sol
    print(path.name, 'pairs', n, 'rmse linear', float(r[half:].pow(2).mean().sqrt()), 'with token bias', float(r2.pow(2).mean().sqrt()),
          'linear in [hp, E[pending]]', float(r3.pow(2).mean().sqrt()), 'lse std', float(lse.std()))
    s_a = torch.nn.functional.silu(a)
    D2 = torch.cat([hp, s_a, torch.ones(n, 1)], 1).double()
    sol2 = torch.linalg.lstsq(D2[:half], lse[:half, None].double()).solution[:, 0]
    r4 = lse[half:].double() - D2[half:] @ sol2
    D3 = torch.cat([hp, s_a, hp * hp, torch.ones(n, 1)], 1).double()
    sol3 = torch.linalg.lstsq(D3[:half], lse[:half, None].double()).solution[:, 0]
    r5 = lse[half:].double() - D3[half:] @ sol3
    print('  [hp, silu(a)]', float(r4.pow(2).mean().sqrt()), ' [hp, silu(a), hp^2]', float(r5.pow(2).mean().sqrt()))
