"""fastcoder's vLLM proposer against a fake model runner (no vLLM needed).

The fake runner has what the proposer reads from vLLM's: ``input_batch.req_ids`` and
``requests[req_id].sampling_params.extra_args``, plus the InputBatch-shaped buffers that
``propose`` receives (``max_num_reqs`` rows, the first N valid). Its "model" is a real file of a
third-party package: a request commits the file's next tokens, and verification accepts the longest
prefix of the chain that matches them (greedy verification of a chain, as vLLM's rejection sampler).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.datastore import Datastore
from engine.serving.vllm_proposer import (DEFAULT_RETRIEVAL, DOC_ARG, REPO_ARG, FastCoderProposer, ProposerConfig,
                                          best_chain, linear_cost)
from tests.conftest import third_party_sources

ROOT = Path(__file__).resolve().parents[1]
MAX_REQS, MAX_LEN = 8, 4096


class FakeRunner:
    """vLLM's model runner as the proposer sees it, driving requests through a greedy chain verifier."""

    def __init__(self, proposer: FastCoderProposer):
        self.proposer = proposer
        self.input_batch = SimpleNamespace(req_ids=[])
        self.requests: dict[str, SimpleNamespace] = {}
        self.targets: dict[str, np.ndarray] = {}
        self.token_ids_cpu = np.zeros((MAX_REQS, MAX_LEN), dtype=np.int32)
        self.num_tokens_no_spec = np.zeros(MAX_REQS, dtype=np.int32)
        self.sampled: dict[str, list[int]] = {}
        self.drafts: dict[str, list[list[int]]] = {}
        self.accepted: dict[str, int] = {}
        proposer.attach_runner(self)

    def add(self, rid: str, target: np.ndarray, prompt_len: int, extra_args: dict | None = None) -> None:
        row = len(self.input_batch.req_ids)
        self.input_batch.req_ids.append(rid)
        self.requests[rid] = SimpleNamespace(sampling_params=SimpleNamespace(extra_args=extra_args),
                                             num_prompt_tokens=prompt_len)
        self.targets[rid] = target
        # prefill: the model's first token is committed with it
        self.token_ids_cpu[row, :prompt_len + 1] = target[:prompt_len + 1]
        self.num_tokens_no_spec[row] = prompt_len + 1
        self.sampled[rid] = [int(target[prompt_len])]
        self.drafts[rid], self.accepted[rid] = [], 0

    def step(self) -> list[list[int]]:
        ids = self.input_batch.req_ids
        out = self.proposer.propose([self.sampled[r] for r in ids], self.num_tokens_no_spec, self.token_ids_cpu,
                                    slot_mappings=None)
        assert len(out) == len(ids)
        for row, (rid, chain) in enumerate(zip(ids, out)):
            self.drafts[rid].append(list(chain))
            n, target = int(self.num_tokens_no_spec[row]), self.targets[rid]
            m = 0
            while m < len(chain) and n + m < len(target) and chain[m] == target[n + m]:
                m += 1
            committed = target[n:n + m + 1]
            self.token_ids_cpu[row, n:n + len(committed)] = committed
            self.num_tokens_no_spec[row] = n + len(committed)
            self.sampled[rid] = [int(t) for t in committed]
            self.accepted[rid] += m
        return out

    def finish(self, rid: str) -> None:
        """Remove a request and condense the batch (vLLM moves the last rows up)."""
        row = self.input_batch.req_ids.index(rid)
        last = len(self.input_batch.req_ids) - 1
        self.token_ids_cpu[row] = self.token_ids_cpu[last]
        self.num_tokens_no_spec[row] = self.num_tokens_no_spec[last]
        self.input_batch.req_ids[row] = self.input_batch.req_ids[last]
        self.input_batch.req_ids.pop()
        self.requests.pop(rid)


@pytest.fixture(scope="module")
def corpus(tiny_tokenizer):
    """Token ids of real third-party files: two 'repositories' (A: two files, B: two others)."""
    files = third_party_sources(6)
    assert len(files) >= 4, "needs installed third-party packages (jinja2, pluggy, pygls, ...)"
    ids = [np.asarray(tiny_tokenizer(p.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"],
                      dtype=np.int64) for p in files]
    vocab = len(tiny_tokenizer)
    return SimpleNamespace(files=files, ids=ids, vocab=vocab,
                           repo_a=Datastore.from_documents(ids[:2], vocab),
                           repo_b=Datastore.from_documents(ids[2:4], vocab))


def make_proposer(corpus, k=6, common=None, options=None, **kw) -> FastCoderProposer:
    config = ProposerConfig(options=dict(options or {}), tokenizer="")
    return FastCoderProposer(None, config, datastores={"A": corpus.repo_a, "B": corpus.repo_b}, common=common,
                             num_speculative_tokens=k, **kw)


def target_slice(ids: np.ndarray, start_frac: float = 0.5, length: int = 1100) -> tuple[np.ndarray, int]:
    """A 'generation': the file's tokens from start to start + length; the first 500 are the prompt."""
    start = int(len(ids) * start_frac)
    start = max(0, min(start, len(ids) - length))
    return ids[start - 500 if start >= 500 else 0:start + length - 500], 500 if start >= 500 else start


def run(runner: FakeRunner, steps: int) -> None:
    for _ in range(steps):
        runner.step()


def test_drafts_come_from_the_requests_repository(corpus):
    proposer = make_proposer(corpus)
    runner = FakeRunner(proposer)
    target, plen = target_slice(corpus.ids[0])
    runner.add("r0", target, plen, {REPO_ARG: "A"})
    run(runner, 40)
    stats = proposer.stats()
    assert runner.accepted["r0"] > 40, stats  # the file is in A: long chains are accepted
    assert stats["accepted_by_source"].get("repo", 0) > 0, stats
    assert set(stats["rows_by_repo"]) == {"A"}
    assert stats["errors"] == 0
    # what the proposer learnt lags one step: the last chain's verdict comes with the next call
    assert runner.accepted["r0"] - 6 <= stats["accepted_tokens"] <= runner.accepted["r0"]
    assert 0 < stats["acceptance_rate"] <= 1


def test_chains_are_cut_to_k_and_to_the_model_length(corpus):
    proposer = make_proposer(corpus, k=3)
    runner = FakeRunner(proposer)
    target, plen = target_slice(corpus.ids[0])
    runner.add("r0", target, plen, {REPO_ARG: "A"})
    run(runner, 20)
    lengths = [len(d) for d in runner.drafts["r0"]]
    assert max(lengths) == 3 and all(n <= 3 for n in lengths)
    # room for one more token before max_model_len: no draft may overflow it
    proposer.max_model_len = int(runner.num_tokens_no_spec[0]) + 2
    assert all(len(d) <= 1 for d in runner.step())
    proposer.max_model_len = int(runner.num_tokens_no_spec[0])
    assert runner.step() == [[]]


def test_each_row_routes_to_its_own_repository_and_unknown_gets_nothing(corpus):
    proposer = make_proposer(corpus, options={"use_context_copy": False, "use_strategy": False})
    runner = FakeRunner(proposer)
    target, plen = target_slice(corpus.ids[0])  # a file of repository A
    runner.add("in-A", target, plen, {REPO_ARG: "A"})
    runner.add("in-B", target, plen, {REPO_ARG: "B"})
    runner.add("unknown", target, plen, {REPO_ARG: "no-such-repo"})
    runner.add("no-repo", target, plen, None)
    first = runner.step()
    n = 1 + plen
    assert len(first[0]) >= 3 and first[0] == target[n:n + len(first[0])].tolist()  # A has the file
    assert first[2] == [] and first[3] == []  # unknown repository; no repository and no D_c: nothing
    run(runner, 30)
    assert all(d == [] for d in runner.drafts["unknown"])
    assert runner.accepted["in-A"] > 3 * max(runner.accepted["in-B"], 1)
    stats = proposer.stats()
    assert stats["unknown_repo_rows"] == 31
    assert set(stats["rows_by_repo"]) == {"A", "B", "no-such-repo"}


def test_common_datastore_and_context_copy_without_a_repository(corpus):
    common = Datastore.from_documents(corpus.ids[:2], corpus.vocab)
    proposer = make_proposer(corpus, common=common)
    runner = FakeRunner(proposer)
    target, plen = target_slice(corpus.ids[0])
    runner.add("r0", target, plen, {})
    run(runner, 30)
    assert proposer.stats()["accepted_by_source"].get("common", 0) > 0
    assert runner.accepted["r0"] > 30


def test_requests_of_one_document_share_the_fastcoder_cache(corpus):
    # only the cache drafts: no datastores, no context copy; searched from the first stored sequence
    options = {"use_repo": False, "use_common": False, "use_context_copy": False, "cache_min_sequences": 1}
    proposer = make_proposer(corpus, options=options)
    runner = FakeRunner(proposer)
    target, plen = target_slice(corpus.ids[2], 0.6, 700)
    runner.add("first", target, plen, {DOC_ARG: "pkg/mod.py"})
    run(runner, 120)  # the model's output goes to the document's cache in chunks
    assert runner.accepted["first"] < 20
    runner.finish("first")
    runner.add("again", target, plen, {DOC_ARG: "pkg/mod.py"})  # the editor asks again at the same place
    runner.add("other-doc", target, plen, {DOC_ARG: "pkg/other.py"})
    run(runner, 30)
    assert runner.accepted["again"] > 30
    assert runner.accepted["other-doc"] == 0
    assert proposer.stats()["accepted_by_source"].get("cache", 0) > 0


def test_without_the_runner_requests_draft_by_row(corpus):
    common = Datastore.from_documents(corpus.ids[:2], corpus.vocab)
    proposer = make_proposer(corpus, common=common)
    runner = FakeRunner(proposer)
    proposer.attach_runner(None)  # a plain `vllm serve --speculative-config ...custom_class...`
    target, plen = target_slice(corpus.ids[1])
    runner.add("r0", target, plen, {REPO_ARG: "no-such-repo"})  # xargs are out of reach: D_c drafts
    run(runner, 30)
    assert runner.accepted["r0"] > 30
    assert proposer.stats()["rows_by_repo"] == {}


class Exploding:
    def search(self, *args, **kwargs):
        raise RuntimeError("disk gone")


def test_errors_never_reach_the_engine(corpus, caplog):
    # searched at every step (a copy from the context would otherwise spare the datastores)
    config = ProposerConfig(tokenizer="", options={"retrieve_beside_copy": True})
    proposer = FastCoderProposer(None, config, datastores={"X": Exploding()}, common=Exploding(),
                                 num_speculative_tokens=4)
    runner = FakeRunner(proposer)
    target, plen = target_slice(corpus.ids[0])
    runner.add("r0", target, plen, {REPO_ARG: "X"})
    runner.add("r1", target, plen, None)
    assert runner.step() == [[], []]
    assert proposer.stats()["errors"] >= 1
    # malformed inputs: more rows than the buffers, None rows, not a sequence
    assert proposer.propose([[1]] * (MAX_REQS + 2), runner.num_tokens_no_spec, runner.token_ids_cpu) \
        == [[]] * (MAX_REQS + 2)
    assert proposer.propose(None, None, None) == []
    assert proposer.propose([[], None], runner.num_tokens_no_spec, runner.token_ids_cpu) == [[], []]


def test_repository_datastores_load_memory_mapped_on_first_use(corpus, tmp_path):
    path = corpus.repo_a.save(tmp_path / "dr-A")
    stats_path = tmp_path / "stats.json"
    config = ProposerConfig(repos={"A": str(path), "broken": str(tmp_path / "missing")}, tokenizer="",
                            stats_path=str(stats_path))
    config_path = config.save(tmp_path / "proposer.json")
    assert ProposerConfig.load(config_path) == config
    proposer = FastCoderProposer(None, ProposerConfig.load(config_path), num_speculative_tokens=6)
    assert not proposer._datastores  # nothing loaded before a request names it
    runner = FakeRunner(proposer)
    target, plen = target_slice(corpus.ids[0])
    runner.add("r0", target, plen, {REPO_ARG: "A"})
    runner.add("r1", target, plen, {REPO_ARG: "broken"})
    run(runner, 10)
    maps = Path("/proc/self/maps").read_text()
    assert str(path / "tokens.npy") in maps and str(path / "sa.npy") in maps
    assert runner.accepted["r0"] > 10 and all(d == [] for d in runner.drafts["r1"])
    proposer._maybe_write_stats(force=True)
    import json

    written = json.loads(stats_path.read_text())
    assert written["rows_by_repo"] == {"A": 10, "broken": 10} and written["accepted_tokens"] > 10


def test_unknown_options_are_refused_at_construction():
    with pytest.raises(TypeError, match="no_such_option"):
        FastCoderProposer(None, ProposerConfig(options={"no_such_option": 1}, tokenizer=""))
    with pytest.raises(ValueError, match="bogus"):
        ProposerConfig.from_dict({"bogus": 1})


def test_best_chain_maximises_expected_tokens_per_cost():
    from engine.draft_tree import DraftTree

    # root children a (p .9) and b (p .5); a -> c (p .9) -> d (p .1)
    tree = DraftTree(np.array([10, 11, 12, 13]), np.array([-1, -1, 0, 2]), np.array([1, 1, 2, 3]),
                     np.ones(4, np.uint8), np.ones(4), probs=np.array([0.9, 0.5, 0.9, 0.1]))
    assert best_chain(tree, 8, linear_cost(0.0)).tolist() == [0, 2, 3]  # free verification: longest gain
    assert best_chain(tree, 1, linear_cost(0.0)).tolist() == [0]
    assert best_chain(tree, 8, linear_cost(0.2)).tolist() == [0, 2]  # d's 0.08 does not pay for itself
    assert best_chain(tree, 8, linear_cost(5.0)).tolist() == []  # verification too dear: no draft
    assert best_chain(DraftTree.empty(), 8, linear_cost(0.0)).tolist() == []


def test_retrieval_defaults_match_the_local_decoder():
    from engine import decoder

    assert DEFAULT_RETRIEVAL == {"budget": decoder.MAX_DRAFT_TOKENS, "max_matches": decoder.SIZED_MAX_MATCHES,
                                 "draft_len": decoder.SIZED_DRAFT_LEN}


def test_the_proposer_imports_without_vllm():
    code = ("import sys, engine.serving.vllm_proposer as m; "
            "assert m.PROPOSER_CLASS == 'engine.serving.vllm_proposer.FastCoderProposer'; "
            "print('vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_datastore_rebuilt_in_place_is_reloaded_and_a_bad_rebuild_keeps_the_old(corpus, tmp_path, monkeypatch):
    from engine.serving import vllm_proposer

    monkeypatch.setattr(vllm_proposer, "RELOAD_CHECK_S", 0.0)
    path = corpus.repo_b.save(tmp_path / "dr")  # the shared path first holds another repository's D_r
    proposer = FastCoderProposer(None, ProposerConfig(repos={"X": str(path)}, tokenizer=""), num_speculative_tokens=6)
    runner = FakeRunner(proposer)
    target, plen = target_slice(corpus.ids[0])
    runner.add("before", target, plen, {REPO_ARG: "X"})
    run(runner, 12)
    assert proposer._repo("X").num_tokens == corpus.repo_b.num_tokens
    corpus.repo_a.save(path)  # `fastcoder index build --repo ... --out PATH` run again: swapped atomically
    runner.add("after", target, plen, {REPO_ARG: "X"})
    run(runner, 12)
    assert proposer._repo("X").num_tokens == corpus.repo_a.num_tokens
    assert proposer.stats()["repo_loads"] == 2
    assert runner.accepted["after"] > runner.accepted["before"]  # target file 0 is in A's D_r, not B's
    (path / "meta.json").write_text("{not json")  # a broken rebuild: keep drafting from what is loaded
    assert proposer._repo("X").num_tokens == corpus.repo_a.num_tokens
    assert proposer.stats()["repo_loads"] == 2 and proposer.stats()["errors"] == 1
