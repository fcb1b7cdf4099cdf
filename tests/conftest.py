"""Shared fixtures: the offline dev model, tiny random models, and prompts from real third-party code."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

TINY_CODER = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "tiny-py-coder"

# Decoders size draft trees with a verify-cost curve; measured under a busy machine it can say that no
# draft pays, and a test asserting that drafts were accepted would then fail by timing alone. Every
# decoder of the suite (language servers started by tests included: they inherit the environment)
# uses one fixed curve measured on the project's CPU; tests/test_cost_model.py measures for real.
os.environ.setdefault("FASTCODER_VERIFY_COST", str(Path(__file__).resolve().parent / "data" / "verify_cost_cpu.json"))
# The same for the native attention's load-time probe (its timing decides how many query rows the kernel takes; on
# a busy machine it once kept it to one row, and every tree step of that process ran without the native step):
# the suite takes every row count the probe finds on an idle machine; tests/test_native_attention.py probes.
os.environ.setdefault("FASTCODER_NATIVE_ATTENTION_ROWS", "64")
# And for the packed layers' probe (native kernel against F.linear at one row): under the suite's load it once chose
# MKL in a language server's process; tests/test_packed_linear.py probes.
os.environ.setdefault("FASTCODER_PACKED_KERNEL", "native")


def third_party_sources(limit: int = 6) -> list[Path]:
    """Source files of installed third-party packages (never the standard library: the dev model's
    training set), deterministic order."""
    files: list[Path] = []
    for pkg in ("jinja2", "pluggy", "pygls", "attr", "click", "pathspec"):
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(list(spec.submodule_search_locations)[0])
        big = sorted((p for p in root.glob("*.py") if p.stat().st_size > 4000), key=lambda p: p.name)
        files.extend(big[:2])
    return files[:limit]


@pytest.fixture(scope="session")
def tiny_coder():
    """tiny-py-coder (7M-parameter Llama trained on the stdlib), fp32 on CPU."""
    if not TINY_CODER.exists():
        pytest.skip(f"dev model not found at {TINY_CODER}")
    from engine import load_model

    return load_model(str(TINY_CODER), device="cpu")


@pytest.fixture()
def model_workspace(tmp_path):
    """An empty workspace folder (``tmp_path/ws``) for a real server with tiny-py-coder; skips without
    the dev model. The server's own cwd should be ``tmp_path`` (never the workspace)."""
    if not TINY_CODER.exists():
        pytest.skip(f"dev model not found at {TINY_CODER}")
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture()
def handlers_repo(tmp_path):
    """A one-file repository (``tmp_path/repo/handlers.py``: twelve near-identical handlers) for the fitting commands'
    tests: enough repeated code for drafts to be verified and accepted in a few short tasks."""
    repo = tmp_path / "repo"
    repo.mkdir()
    body = "\n".join(f"def handler_{i}(request, value):\n    result = request.get(value)\n    if result is None:\n"
                     f"        return handler_{i}.default\n    return result + {i}\n" for i in range(12))
    (repo / "handlers.py").write_text(body)
    return repo


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """tiny-py-coder's tokenizer alone (found relative to the clone, like :data:`TINY_CODER`)."""
    if not TINY_CODER.exists():
        pytest.skip(f"dev model not found at {TINY_CODER}")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TINY_CODER))


@pytest.fixture(scope="session")
def real_code_prompts(tiny_coder):
    """(file name, prompt token ids) at several positions of several real third-party files."""
    prompts = []
    for path in third_party_sources(4):
        text = path.read_text(encoding="utf-8")
        for frac in (0.3, 0.7):
            cut = text.rfind("\n", 0, int(len(text) * frac)) + 1
            ids = tiny_coder.tokenizer(text[:cut], add_special_tokens=False)["input_ids"][-700:]
            prompts.append((f"{path.parent.name}/{path.name}@{cut}", ids))
    assert len(prompts) >= 6, "need real code from installed packages"
    return prompts


def tree_mask(past: int, parent: list[int]) -> "torch.Tensor":
    """The additive 4D tree-attention mask (1, 1, n, past + n) for n nodes after ``past`` cached tokens, node i
    under ``parent[i]`` (-1: the root): each node sees the cache, itself and its ancestors (float32 min
    elsewhere), as :meth:`engine.draft_tree.DraftTree.attention_mask` builds it."""
    import torch

    n = len(parent)
    allow = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            allow[i, j], j = True, parent[j]
    hidden = torch.cat([torch.zeros(n, past, dtype=torch.bool), ~allow], 1)
    return torch.zeros(1, 1, n, past + n).masked_fill_(hidden, torch.finfo(torch.float32).min)


def chain_in_tree_logits(model, vocab: int = 256, ctx: int = 50):
    """(tree, sequential): a chain of 6 tokens inside a draft tree (a sibling branch after its second token)
    verified in one forward under the tree mask after a ``ctx``-token prompt, and the same chain decoded one
    token at a time: ((7, V) logits of the tree's nodes, [6 x (V,) logits]); the chain's nodes are tree rows
    0, 1, 3, 4, 5, 6."""
    import torch

    from engine.kv_cache import new_kv_cache

    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, vocab, (1, ctx), generator=gen)
    chain = torch.randint(0, vocab, (1, 6), generator=gen)
    ids = torch.cat([chain[:, :2], torch.tensor([[7]]), chain[:, 2:]], 1)  # nodes: c0 c1 sibling c2 .. c5
    parent = [-1, 0, 0, 1, 3, 4, 5]
    depth = [0, 1, 1, 2, 3, 4, 5]
    with torch.inference_mode():
        tree_cache = new_kv_cache(model, ctx + 16)
        model(input_ids=prompt, past_key_values=tree_cache, use_cache=True, logits_to_keep=1)
        tree = model(input_ids=ids, position_ids=(ctx + torch.tensor(depth))[None], attention_mask=tree_mask(ctx, parent),
                     past_key_values=tree_cache, use_cache=True, logits_to_keep=len(parent)).logits[0]
        seq_cache = new_kv_cache(model, ctx + 16)
        model(input_ids=prompt, past_key_values=seq_cache, use_cache=True, logits_to_keep=1)
        seq = [model(input_ids=chain[:, i:i + 1], past_key_values=seq_cache, use_cache=True).logits[0, -1]
               for i in range(6)]
    return tree, seq


def random_model(family: str, vocab_size: int = 512, seed: int = 0):
    """A tiny randomly initialised causal LM of ``family`` (llama | qwen2 | gpt2), fp32, eval mode."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    if family == "llama":
        cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
        model = LlamaForCausalLM(cfg)
    elif family == "qwen2":
        cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
        model = Qwen2ForCausalLM(cfg)
    elif family == "gpt2":
        cfg = GPT2Config(vocab_size=vocab_size, n_embd=64, n_layer=2, n_head=4, n_positions=512)
        model = GPT2LMHeadModel(cfg)
    else:
        raise ValueError(family)
    return model.eval()


def loaded_random(family: str, vocab_size: int = 512, seed: int = 0):
    from engine.model import LoadedModel

    model = random_model(family, vocab_size, seed)
    return LoadedModel(model=model, tokenizer=None, device=torch.device("cpu"), dtype=torch.float32,
                       name=f"random-{family}")


@pytest.fixture
def one_thread():
    """One torch thread (two threads on a loaded 2-core machine spin and run ~20x slower); restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def engine_cli(monkeypatch):
    """Run ``python -m engine ARGS`` in this process: ``engine_cli([...]) -> (exit status, stdout, stderr)``.

    The same entry point as the command (:func:`engine.cli.main`), without a new interpreter's ~6 s of torch and
    transformers imports. What a command leaves in this process is undone after each call, as its own process's exit
    would: its ``--threads``, and the bench runner's per-model tables (estimators, histories, suffix caches keyed by
    ``id(loaded)``: a freed model's id can be a later test's model's)."""
    import contextlib
    import io

    from engine.bench import runner
    from engine.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = torch.get_num_threads()
    tables = (runner._ESTIMATORS, runner._HISTORIES, runner._SUFFIX_CACHES)

    def run(argv: list[str]) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        held = [set(table) for table in tables]
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    status = main([str(a) for a in argv])
                except SystemExit as exc:  # argparse's own errors
                    status = exc.code if isinstance(exc.code, int) else 2
        finally:
            torch.set_num_threads(before)
            for table, keys in zip(tables, held):
                for key in set(table) - keys:
                    del table[key]
        return status, out.getvalue(), err.getvalue()

    return run
