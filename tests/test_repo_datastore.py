"""engine.repo_datastore: file filter, incremental updates equal a rebuild, exclude_span, threads."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from engine.datastore import DatastoreError, Retrieval
from engine.repo_datastore import ChunkEncoder, RepoDatastore, read_source_text, split_chunks

@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer):
    return tiny_tokenizer


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def summary(r: Retrieval):
    rows = [(tuple(x), int(c)) for x, c in zip(r.continuations.tolist(), r.counts.tolist())]
    return r.match_length, rows, r.total_matches


FILES = {
    "pkg/__init__.py": "from .core import run\n",
    "pkg/core.py": (
        "import os\n\n\nclass Runner:\n    def __init__(self, path):\n        self.path = path\n\n"
        "    def run(self, *args):\n        for a in args:\n            print(self.path, a)\n"
        "        return len(args)\n\n\ndef run(path):\n    return Runner(path).run()\n"),
    "pkg/util.py": ("def helper(x):\n    return x * 2\n\n\ndef other(y):\n    if y:\n"
                    "        return helper(y)\n    return None\n"),
    "README.md": "# Demo\n\nRun `python -m pkg`.\n",
}


def write_tree(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


# ------------------------------------------------------------------------------- file filter


def test_gitignore_exclude_and_skipped_dirs(tmp_path, tokenizer):
    write_tree(tmp_path, FILES)
    write_tree(tmp_path, {
        ".gitignore": "build/\n*.log.py\n!keep.log.py\n",
        "sub/.gitignore": "local_*.py\n",
        "sub/local_secret.py": "x = 1\n",
        "sub/ok.py": "y = 2\n",
        "build/gen.py": "z = 3\n",
        "a.log.py": "l = 1\n",
        "keep.log.py": "k = 1\n",
        "docs/skipme.py": "d = 1\n",
        ".git/config.py": "g = 1\n",
        ".venv/lib/site.py": "v = 1\n",
        "myenv/pyvenv.cfg": "home = /usr\n",
        "myenv/lib/mod.py": "m = 1\n",
        "node_modules/x/index.js": "module.exports = 1\n",
        "pkg/__pycache__/core.py": "c = 1\n",
        "data.bin": "not code\n",
    })
    repo = RepoDatastore.build(tmp_path, tokenizer, exclude=["docs/"])
    assert repo.files() == sorted(["README.md", "keep.log.py", "pkg/__init__.py", "pkg/core.py",
                                   "pkg/util.py", "sub/ok.py"])
    assert repo.num_files == 6 and repo.num_tokens > 50 and repo.root == tmp_path.resolve()
    # updates of filtered paths are ignored
    assert repo.update(tmp_path / "build" / "new.py", "secret_build = 1\n") is False
    assert repo.update(tmp_path / "docs" / "x.py", "x = 1\n") is False
    assert repo.update(tmp_path / "myenv" / "lib" / "y.py", "x = 1\n") is False
    assert repo.update("/definitely/outside/file.py", "x = 1\n") is False
    assert repo.version == 0


def test_binary_non_utf8_and_huge_files(tmp_path, tokenizer):
    write_tree(tmp_path, {"good.py": "value = 42\n"})
    (tmp_path / "binary.py").write_bytes(b"x = 1\n\x00\x01\x02")
    (tmp_path / "latin1.py").write_bytes("s = 'caf\u00e9'\n".encode("latin-1"))
    (tmp_path / "huge.py").write_text("a = 1\n" * 5000)
    progress = []
    repo = RepoDatastore.build(tmp_path, tokenizer, max_file_bytes=10_000,
                               progress=lambda done, total: progress.append((done, total)))
    assert repo.files() == ["good.py"]
    assert progress and progress[-1] == (4, 4)
    assert read_source_text(tmp_path / "binary.py") is None
    assert read_source_text(tmp_path / "latin1.py") is None
    assert read_source_text(tmp_path / "huge.py", max_file_bytes=10_000) is None
    # a huge or binary editor buffer removes the file instead of indexing it
    assert repo.update(tmp_path / "good.py", "b = 2\n" * 5000) is False
    assert repo.num_files == 0


def test_build_rejects_missing_root(tmp_path, tokenizer):
    with pytest.raises(DatastoreError, match="not a directory"):
        RepoDatastore.build(tmp_path / "missing", tokenizer)


def test_empty_repository(tmp_path, tokenizer):
    repo = RepoDatastore.build(tmp_path, tokenizer)
    assert repo.num_files == 0 and repo.search([1, 2, 3]).match_length == 0
    assert repo.update(tmp_path / "new.py", "hello_world = 1\n")
    assert repo.search(ids(tokenizer, "hello_world ="), n_min=1).match_length >= 2


# ------------------------------------------------------------------------------- chunked tokenisation


def test_chunked_tokenisation_equals_whole_text(tokenizer):
    enc = ChunkEncoder(tokenizer)
    assert enc.chunked  # byte-level BPE: chunk boundaries are pre-token boundaries
    texts = list(FILES.values()) + ["\n\n\nx\n", "  \n\tdef f():\n\t\treturn 1\n", "", "a" * 50]
    got, _ = enc.encode(texts)
    for text, arr in zip(texts, got):
        assert "".join(split_chunks(text)) == text
        assert arr.tolist() == ids(tokenizer, text)


# ------------------------------------------------------------------------------- incremental updates


def random_edit(rng: random.Random, files: dict[str, str]) -> tuple[str, str | None]:
    """One random edit: (rel, new text) or (rel, None) for a removal."""
    kind = rng.choice(["modify", "modify", "add", "remove", "revert"])
    rels = sorted(files)
    if kind == "add" or not rels:
        return f"pkg/new_{rng.randrange(1000)}.py", f"def fn_{rng.randrange(99)}(q):\n    return q + 1\n"
    rel = rng.choice(rels)
    if kind == "remove":
        return rel, None
    if kind == "revert":
        return rel, FILES.get(rel, files[rel])
    lines = files[rel].splitlines(keepends=True) or ["\n"]
    i = rng.randrange(len(lines))
    snippet = rng.choice(["    return self.path\n", "x = helper(3)\n", "\n", "        print(a)\n",
                          "def run(path):\n"])
    lines.insert(i, snippet) if rng.random() < 0.7 else lines.pop(i)
    return rel, "".join(lines)


def contexts_for(tokenizer, files, rng: random.Random, k=25):
    streams = [ids(tokenizer, t) for t in files.values() if t]
    out = []
    for _ in range(k):
        s = rng.choice(streams) if streams else [1, 2, 3]
        end = rng.randrange(1, len(s) + 1)
        out.append(s[max(0, end - rng.randrange(2, 20)):end])
    return out


@pytest.mark.parametrize("seed,merge_small", [(0, False), (1, False), (2, True)])
def test_incremental_updates_equal_rebuild(tmp_path, tokenizer, seed, merge_small):
    rng = random.Random(seed)
    root = tmp_path / "repo"
    write_tree(root, FILES)
    repo = RepoDatastore.build(root, tokenizer)
    if merge_small:  # exercise merges into a new base as well
        repo.merge_overlay_tokens = 60
        repo.merge_tomb_tokens = 60
    files = dict(FILES)
    version = repo.version
    for step in range(12):
        rel, text = random_edit(rng, files)
        if text is None:
            files.pop(rel, None)
            (root / rel).unlink(missing_ok=True)
            repo.remove(root / rel)
        else:
            files[rel] = text
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
            repo.update(rel if step % 2 else root / rel, text)
        assert repo.version >= version
        version = repo.version
        if step % 3 == 2 or step == 11:
            fresh = RepoDatastore.build(root, tokenizer)
            assert repo.files() == fresh.files()
            assert repo.num_tokens == fresh.num_tokens
            for ctx in contexts_for(tokenizer, files, rng):
                for n_min in (1, 2):
                    a = repo.search(ctx, n_min=n_min, draft_len=6, max_matches=10_000)
                    b = fresh.search(ctx, n_min=n_min, draft_len=6, max_matches=10_000)
                    assert summary(a) == summary(b), (step, ctx)


def test_version_counts_changes_only(tmp_path, tokenizer):
    write_tree(tmp_path, FILES)
    repo = RepoDatastore.build(tmp_path, tokenizer)
    assert repo.version == 0
    assert repo.update(tmp_path / "pkg/util.py", FILES["pkg/util.py"])  # same text: no change
    assert repo.version == 0
    repo.update(tmp_path / "pkg/util.py", FILES["pkg/util.py"] + "z = 1\n")
    assert repo.version == 1
    assert repo.remove(tmp_path / "pkg/util.py") and repo.version == 2
    assert repo.remove(tmp_path / "pkg/util.py") is False and repo.version == 2
    assert repo.num_files == len(FILES) - 1


def test_new_identifier_retrievable_after_update(tmp_path, tokenizer):
    write_tree(tmp_path, FILES)
    repo = RepoDatastore.build(tmp_path, tokenizer)
    ident = "zqx_frobnicate_widget"
    query = ids(tokenizer, f"result = {ident}(")
    assert repo.search(query).match_length < len(query)
    repo.update(tmp_path / "pkg/util.py", FILES["pkg/util.py"] + f"\nresult = {ident}(41, 1)\n")
    r = repo.search(query, draft_len=4)
    assert r.match_length == len(query)
    assert tokenizer.decode(r.continuations[0][r.continuations[0] >= 0]).startswith("41")
    repo.update(tmp_path / "pkg/brand_new.py", f"{ident}_two = 7\n")
    r = repo.search(ids(tokenizer, f"{ident}_two ="), draft_len=2)
    assert tokenizer.decode(r.continuations[0][:1]).strip() == "7"
    # removing the file makes the old content unretrievable again
    repo.update(tmp_path / "pkg/util.py", FILES["pkg/util.py"])
    assert repo.search(query).match_length < len(query)


def test_exclude_span_keeps_target_out(tmp_path, tokenizer):
    target = "def secret_body():\n    return compute_the_answer_zz(42)\n"
    text = "import os\n\n" + target + "\nprint(os.sep)\n"
    write_tree(tmp_path, {"mod.py": text, "other.py": "x = 1\n"})
    start = text.index(target)
    repo = RepoDatastore.build(tmp_path, tokenizer,
                               exclude_span=(str(tmp_path / "mod.py"), start, start + len(target)))
    q = ids(tokenizer, " return compute_the_answer_zz(42")
    assert repo.search(q, n_min=2).match_length < 4
    r = repo.search(ids(tokenizer, "print(os"), draft_len=2)
    assert r.match_length >= 2  # the rest of the file is still indexed
    full = RepoDatastore.build(tmp_path, tokenizer)
    assert full.search(q).match_length == len(q)


def test_builds_sharing_a_chunk_cache_equal_fresh_builds_and_tokenise_less(tmp_path, tokenizer, monkeypatch):
    """One D_r per task (the benchmark, build-output-store): with one chunk cache, a second build with another span cut
    out holds the same tokens as a build from scratch, and tokenises only the chunks it had not seen."""
    from engine import source_chunks

    more = {f"pkg/m{i}.py": "".join(f"def f{i}_{j}(x):\n    return x + {j}\n\n" for j in range(40)) for i in range(10)}
    write_tree(tmp_path, {**FILES, **more})
    text = FILES["pkg/util.py"]
    spans = [(str(tmp_path / "pkg/util.py"), 0, len(text) // 3), (str(tmp_path / "pkg/util.py"), len(text) // 2, len(text))]
    chars = [0]  # characters given to the tokenizer (the encoder's calibration included, the same in every build)
    real = source_chunks.tokenize_texts
    monkeypatch.setattr(source_chunks, "tokenize_texts",
                        lambda tok, texts: chars.__setitem__(0, chars[0] + sum(map(len, texts))) or real(tok, texts))

    def build(span, cache=None):
        chars[0] = 0
        return RepoDatastore.build(tmp_path, tokenizer, exclude_span=span, chunk_cache=cache), chars[0]

    cache: dict = {}
    (shared_a, _), (shared_b, cached_chars) = build(spans[0], cache), build(spans[1], cache)
    (fresh_a, _), (fresh_b, fresh_chars) = build(spans[0]), build(spans[1])
    for a, b in ((shared_a, fresh_a), (shared_b, fresh_b)):
        assert sorted(a._files) == sorted(b._files)
        for rel in a._files:
            assert [d.tolist() for d in a._files[rel]] == [d.tolist() for d in b._files[rel]], rel
    assert cache and cached_chars < fresh_chars / 2, (cached_chars, fresh_chars)


def test_reader_thread_during_updates(tmp_path, tokenizer):
    write_tree(tmp_path, FILES)
    repo = RepoDatastore.build(tmp_path, tokenizer)
    repo.merge_overlay_tokens = 200
    ctx = ids(tokenizer, "    def run(self, *args):\n")
    errors, stop = [], threading.Event()

    def reader():
        try:
            while not stop.is_set():
                repo.search(ctx, draft_len=8)
        except Exception as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(30):
            repo.update(tmp_path / "pkg/core.py", FILES["pkg/core.py"] + f"\nv{i} = {i}\n")
    finally:
        stop.set()
        t.join()
    assert not errors
    assert repo.search(ids(tokenizer, "\nv29 ="), n_min=2).match_length >= 2


def test_sampling_with_pending_edits_respects_cap(tmp_path, tokenizer):
    body = "value = compute(1)\n" * 300
    write_tree(tmp_path, {"a.py": body, "b.py": body})
    repo = RepoDatastore.build(tmp_path, tokenizer)
    repo.update(tmp_path / "a.py", body + "value = compute(2)\n")
    r = repo.search(ids(tokenizer, "value = compute("), draft_len=2, max_matches=32)
    assert r.total_matches == 601 and int(r.counts.sum()) <= 32
    np.testing.assert_array_equal(r.counts, np.sort(r.counts)[::-1])
