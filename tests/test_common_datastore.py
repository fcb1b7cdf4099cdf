"""engine.common_datastore: D_c build over a small corpus, cache keys, load validation."""

from __future__ import annotations

import os

import numpy as np
import pytest

from engine.common_datastore import (build_common_datastore, corpus_files, corpus_fingerprint,
                                     load_common_datastore, tokenizer_fingerprint)
from engine.datastore import Datastore, DatastoreError

@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer):
    return tiny_tokenizer


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTCODER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture()
def corpus(tmp_path):
    root = tmp_path / "corpus"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "shapes.py").write_text(
        "class Circle:\n    def area(self):\n        return 3.14159 * self.radius ** 2\n")
    (root / "lib" / "text.py").write_text("def shout(s):\n    return s.upper() + '!'\n")
    (root / "blob.py").write_bytes(b"\x00\x01binary")
    return root


def test_tokenizer_fingerprint_is_stable_and_short(tokenizer):
    fp = tokenizer_fingerprint(tokenizer)
    assert fp == tokenizer_fingerprint(tokenizer)
    assert len(fp) == 16 and int(fp, 16) >= 0


def test_build_and_load_small_corpus(tokenizer, corpus, cache_dir):
    out = build_common_datastore(tokenizer, corpus, progress=False)
    assert out.parent == cache_dir / "datastores"
    assert out.name.startswith(tokenizer_fingerprint(tokenizer) + "-")
    ds = load_common_datastore(tokenizer, str(out))
    assert isinstance(ds, Datastore) and ds.num_documents == 2  # blob.py is binary: skipped
    ctx = tokenizer(" return 3.14159 *", add_special_tokens=False)["input_ids"]
    r = ds.search(ctx, draft_len=3)
    assert r.match_length == len(ctx)
    assert tokenizer.decode(r.continuations[0]).strip().startswith("self")


def test_explicit_out_and_progress_bar(tokenizer, corpus, tmp_path, capsys):
    out = build_common_datastore(tokenizer, corpus, out=tmp_path / "dc", progress=True)
    assert out == tmp_path / "dc" and (out / "meta.json").is_file()
    assert "D_c" in capsys.readouterr().err


def test_cache_key_changes_with_corpus(tokenizer, corpus):
    root, files = corpus_files(corpus)
    before = corpus_fingerprint(root, files)
    assert corpus_fingerprint(*corpus_files(corpus)) == before
    (corpus / "lib" / "text.py").write_text("def whisper(s):\n    return s.lower()\n")
    os.utime(corpus / "lib" / "text.py", ns=(1, 1))
    assert corpus_fingerprint(*corpus_files(corpus)) != before
    (corpus / "lib" / "new.py").write_text("z = 1\n")
    assert len(corpus_files(corpus)[1]) == 4


def test_stdlib_corpus_listing():
    root, files = corpus_files(None)
    assert files and all(f.suffix == ".py" for f in files)
    assert not any("site-packages" in f.parts for f in files)
    assert (root / "os.py") in files


def test_load_specs_and_errors(tokenizer, corpus, cache_dir, tmp_path):
    assert load_common_datastore(tokenizer, "none") is None
    assert load_common_datastore(tokenizer, None) is None
    with pytest.raises(DatastoreError, match="not found"):
        load_common_datastore(tokenizer, str(tmp_path / "missing"))
    with pytest.raises(DatastoreError, match="no standard-library datastore"):
        load_common_datastore(tokenizer, "stdlib", build_if_missing=False)
    other = Datastore.from_documents([np.arange(5)], vocab_size=len(tokenizer),
                                     tokenizer_fingerprint="0123456789abcdef")
    path = other.save(tmp_path / "other")
    with pytest.raises(DatastoreError, match="different tokenizer"):
        load_common_datastore(tokenizer, str(path))
    with pytest.raises(DatastoreError, match="does not exist"):
        build_common_datastore(tokenizer, tmp_path / "no-corpus", progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatastoreError, match="no readable source files"):
        build_common_datastore(tokenizer, tmp_path / "empty", progress=False)
