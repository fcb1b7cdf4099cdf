"""Crash-safe state (issue #12): datastore saves are atomic, interrupted saves are cleaned up, a
corrupt cached D_c is reported once and rebuilt, and files truncated under a loaded store cannot
kill the process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from engine import common_datastore
from engine.datastore import Datastore, DatastoreError, remove_stale_temporaries

ROOT = Path(__file__).resolve().parents[1]


def _store(seed: int, docs: int = 40, length: int = 5000) -> Datastore:
    rng = np.random.default_rng(seed)
    return Datastore.from_documents([rng.integers(1, 500, length) for _ in range(docs)], 512,
                                    tokenizer_fingerprint="test")


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    target = tmp_path / "ds"
    dead = tmp_path / ".ds.tmp-999999-abc"
    old = tmp_path / ".ds.old-999998"
    mine = tmp_path / f".ds.tmp-{os.getpid()}-xyz"
    other = tmp_path / ".unrelated.tmp-999999-x"
    for d in (dead, old, mine, other):
        d.mkdir()
    removed = remove_stale_temporaries(target)
    assert sorted(removed) == sorted([dead, old])
    assert mine.exists() and other.exists()


def _dead_pid() -> int:
    """The pid of a process that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_save_killed_between_its_two_renames_is_recovered(tmp_path, monkeypatch):
    """Where the system has no atomic exchange a save renames twice: a kill between the renames leaves the old
    store as .NAME.old-PID and no NAME. The next load (or save's clean-up) puts the old store back."""
    from engine.datastore import files

    target = tmp_path / "ds"
    first = _store(1, docs=4, length=300)
    first.save(target)
    pid = _dead_pid()
    target.rename(tmp_path / f".ds.old-{pid}")  # the kill's moment: old moved aside, the new one not in place
    (tmp_path / f".ds.tmp-{pid}-abc").mkdir()  # the new store's half-written temporary
    loaded = Datastore.load(target, tokenizer_fingerprint="test")
    assert np.array_equal(np.asarray(loaded._tokens), np.asarray(first._tokens))
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".ds.tmp-{pid}-abc", "ds"]
    target.rename(tmp_path / f".ds.old-{pid}")
    assert remove_stale_temporaries(target) == [tmp_path / f".ds.tmp-{pid}-abc"]  # restored, not deleted
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)  # the two-rename path still replaces the store
    _store(2, docs=4, length=300).save(target)
    assert Datastore.load(target, tokenizer_fingerprint="test").num_documents == 4
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_kill_9_during_saves_never_leaves_a_torn_datastore(tmp_path):
    """Kill a process that saves stores over one path at random moments; after every kill the path
    holds a whole, valid store (or none yet), and the next save cleans up what the kill left."""
    target = tmp_path / "ds"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import numpy as np
        from engine.datastore import Datastore
        i = 0
        while True:
            rng = np.random.default_rng(i)
            Datastore.from_documents([rng.integers(1, 500, 20000) for _ in range(20)], 512,
                                     tokenizer_fingerprint="test").save({str(target)!r})
            i += 1
            print(i, flush=True)
    """)
    rng = np.random.default_rng(0)
    kills, valid = 0, 0
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()  # at least one save finished: the target exists from here on
        time.sleep(float(rng.uniform(0.0, 0.4)))  # a random moment inside a later save
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        kills += 1
        Datastore.load(target, tokenizer_fingerprint="test")  # raises if torn
        valid += 1
    remove_stale_temporaries(target)
    assert kills == valid == 8
    assert [p.name for p in tmp_path.iterdir()] == ["ds"], "temporaries left behind"


def test_corrupt_cached_common_datastore_is_reported_once_and_rebuilt(tmp_path, monkeypatch, tiny_tokenizer):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.py").write_text("def f(x):\n    return x + 1\n" * 20)
    monkeypatch.setenv("FASTCODER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(common_datastore, "corpus_files",
                        lambda corpus_arg=None: (corpus, [corpus / "a.py"]))
    first = common_datastore.load_common_datastore(tiny_tokenizer, "stdlib", progress=False)
    cached = next((tmp_path / "cache" / "datastores").iterdir())
    with open(cached / "sa.npy", "r+b") as fh:  # flip bytes inside the array
        fh.seek(-8, os.SEEK_END)
        fh.write(b"\xff" * 8)
    with pytest.raises(DatastoreError):
        Datastore.load(cached)
    told: list[str] = []
    progress: list[tuple[int, int]] = []
    again = common_datastore.load_common_datastore(tiny_tokenizer, "stdlib", progress=False,
                                                   on_rebuild=told.append,
                                                   on_progress=lambda d, t: progress.append((d, t)))
    assert len(told) == 1 and "rebuilding" in told[0]
    assert progress and progress[-1] == (1, 1)
    assert again.num_tokens == first.num_tokens
    # a corrupt datastore given as a path says how to fix it
    with open(cached / "tokens.npy", "r+b") as fh:
        fh.truncate(100)
    with pytest.raises(DatastoreError, match="fastcoder index build"):
        common_datastore.load_common_datastore(tiny_tokenizer, str(cached), progress=False)


def test_truncating_the_files_of_a_loaded_store_cannot_kill_the_process(tmp_path):
    path = _store(1).save(tmp_path / "ds")
    script = textwrap.dedent(f"""
        import sys, os
        sys.path.insert(0, {str(ROOT)!r})
        import numpy as np
        from engine.datastore import Datastore
        ds = Datastore.load({str(path)!r})
        for name in ("tokens.npy", "sa.npy"):
            with open(os.path.join({str(path)!r}, name), "r+b") as fh:
                fh.truncate(64)
        r = ds.search(np.arange(1, 40), n_max=8, n_min=1, draft_len=4)
        print("alive", r.match_length >= 0)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "alive True" in out.stdout
