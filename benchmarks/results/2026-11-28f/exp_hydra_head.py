"""Could a head that also sees the pending token draft the token after it? An offline estimate (top-1 agreement).

Medusa's head (the packaged draft head: h' = h + W2 SiLU(W1 h), logits through the tied embedding) reads the token
after next off the final hidden state h_i alone. A Hydra-style head (Ankner et al. 2024) also gets the pending token's
embedding: h' = h + W2 SiLU(W1 [h; E[x_{i+1}]]). Both are trained on the standard library (the model's training
text) to predict the model's own greedy choice at i + 1, and compared on third-party code (jinja2, pluggy, pygls
files) at the positions where the model's choice at i is the text's next token (as in a greedy generation, where
the pending token is the model's choice).

Usage: .venv/bin/python benchmarks/results/2026-11-28f/exp_hydra_head.py  ($TRAIN_FILES, $EPOCHS, $THREADS)
"""
import glob, os, random, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
from engine import load_model  # noqa: E402

loaded = load_model(str(ROOT.parent / "shared" / "models" / "tiny-py-coder"))
model, tok = loaded.model, loaded.tokenizer
E = model.get_output_embeddings().weight.detach().float()


@torch.inference_mode()
def pairs(files, limit=4096):
    """(H_i, x_{i+1}, choice_i, choice_{i+1}) over windows of 1,024 tokens of each file's first ``limit`` tokens."""
    H, X, C0, C1 = [], [], [], []
    for f in files:
        ids = tok(open(f, encoding="utf-8", errors="ignore").read(), add_special_tokens=False)["input_ids"]
        for s in range(0, max(min(len(ids), limit) - 64, 0), 1024):
            piece = ids[s:s + 1024]
            h = model.model(input_ids=torch.tensor([piece])).last_hidden_state[0].float()
            c = (h @ E.T).argmax(-1)
            H.append(h[:-1]); X.append(torch.tensor(piece[1:])); C0.append(c[:-1]); C1.append(c[1:])
    return torch.cat(H), torch.cat(X), torch.cat(C0), torch.cat(C1)


class Head(torch.nn.Module):
    def __init__(self, hydra, d=256, r=256):
        super().__init__()
        self.hydra = hydra
        self.w1, self.w2 = torch.nn.Linear(2 * d if hydra else d, r), torch.nn.Linear(r, d)
        torch.nn.init.zeros_(self.w2.weight); torch.nn.init.zeros_(self.w2.bias)

    def forward(self, h, x):
        inp = torch.cat([h, E[x]], -1) if self.hydra else h
        return (h + self.w2(torch.nn.functional.silu(self.w1(inp)))) @ E.T


t0 = time.time()
files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))
random.Random(0).shuffle(files)
H, X, C0, C1 = pairs(files[:int(os.environ.get("TRAIN_FILES", "80"))])
print(f"train pairs {len(H)} ({time.time() - t0:.0f} s)", flush=True)
site = ROOT / ".venv" / "lib" / "python3.11" / "site-packages"
tests = {r: pairs(sorted(glob.glob(str(site / r / "**" / "*.py"), recursive=True))[:40], 2048)
         for r in ("jinja2", "pluggy", "pygls")}
heads = {"medusa": Head(False), "hydra": Head(True)}
for name, head in heads.items():
    opt = torch.optim.Adam(head.parameters(), lr=1e-3)
    for epoch in range(int(os.environ.get("EPOCHS", "3"))):
        perm = torch.randperm(len(H))
        for b in range(0, len(H), 1024):
            i = perm[b:b + 1024]
            loss = torch.nn.functional.cross_entropy(head(H[i], X[i]), C1[i])
            opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():
        for r, (h, x, c0, c1) in tests.items():
            ok = c0 == x  # greedy-like positions: the pending token is the model's choice
            z = head(h[ok], x[ok])
            top = z.topk(4, -1).indices
            hit1 = float((top[:, 0] == c1[ok]).float().mean())
            hit4 = float((top == c1[ok][:, None]).any(-1).float().mean())
            p = torch.softmax(z, -1).max(-1).values
            conf = p > 0.5
            hc = float((top[conf, 0] == c1[ok][conf]).float().mean())
            print(f"{name} {r}: positions {int(ok.sum())} top-1 {hit1:.3f} top-4 {hit4:.3f}; "
                  f"p>0.5 on {float(conf.float().mean()):.3f} of them, top-1 there {hc:.3f}", flush=True)
print(f"done in {time.time() - t0:.0f} s")
