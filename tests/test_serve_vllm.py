"""``fastcoder serve-vllm`` without starting vLLM: datastores, the proposer's configuration, the command."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.serving import serve_vllm
from engine.serving.vllm_proposer import CONFIG_ENV, PROPOSER_CLASS, REPO_ARG, FastCoderProposer, ProposerConfig

ROOT = Path(__file__).resolve().parents[1]
PLUGGY = Path(importlib.util.find_spec("pluggy").submodule_search_locations[0]).resolve()


def test_vllm_command_uses_the_proposer_and_the_worker_class(tmp_path, monkeypatch):
    monkeypatch.setattr(serve_vllm, "has_gpu", lambda: False)
    cmd = serve_vllm.vllm_command(Path("/v/bin/vllm"), "M", "127.0.0.1", 8123, "fastcoder", 6, 2048, None)
    spec = json.loads(cmd[cmd.index("--speculative-config") + 1])
    assert spec == {"method": "custom_class", "model": PROPOSER_CLASS, "num_speculative_tokens": 6}
    assert cmd[cmd.index("--worker-cls") + 1] == "engine.serving.vllm_worker.FastCoderCPUWorker"
    assert cmd[cmd.index("--dtype") + 1] == "float32" and cmd[cmd.index("--port") + 1] == "8123"
    plain = serve_vllm.vllm_command(Path("/v/bin/vllm"), "M", "127.0.0.1", 8123, "none", 6, 2048, None)
    assert "--speculative-config" not in plain and "--worker-cls" not in plain
    for method in ("ngram", "suffix"):
        c = serve_vllm.vllm_command(Path("/v/bin/vllm"), "M", "127.0.0.1", 1, method, 5, 2048, None)
        assert json.loads(c[c.index("--speculative-config") + 1])["method"] == method
    env = serve_vllm.server_env(tmp_path / "p.json", tmp_path, base={"PYTHONPATH": "/x"})
    assert env["PYTHONPATH"].split(":") == [str(ROOT), "/x"]
    assert env[CONFIG_ENV] == str(tmp_path / "p.json") and env["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert env["VLLM_CACHE_ROOT"].startswith(str(tmp_path))


def test_a_missing_vllm_venv_is_one_line_naming_the_setup_script(tmp_path):
    with pytest.raises(serve_vllm.ServeError, match="scripts/setup_vllm.sh"):
        serve_vllm.vllm_executable(tmp_path / "nope")
    out = subprocess.run([sys.executable, "-m", "fastcoder", "serve-vllm", "--model", "M", "--venv",
                          str(tmp_path / "nope")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "setup_vllm.sh" in out.stderr


def test_prepare_config_indexes_repositories_once_and_the_proposer_drafts_from_them(tiny_tokenizer, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.setenv("FASTCODER_CACHE_DIR", str(tmp_path / "cache"))
    config = serve_vllm.prepare_config(tiny_tokenizer, [f"plug={PLUGGY}"], common="none", progress=False)
    assert set(config.repos) == {"plug", str(PLUGGY)} and len(set(config.repos.values())) == 1
    path = Path(config.repos["plug"])
    stamp = (path / "tokens.npy").stat().st_mtime_ns
    again = serve_vllm.prepare_config(tiny_tokenizer, [str(PLUGGY)], common="none", progress=False)
    assert again.repos[str(PLUGGY)] == str(path) and (path / "tokens.npy").stat().st_mtime_ns == stamp
    with pytest.raises(serve_vllm.ServeError, match="not a folder"):
        serve_vllm.prepare_config(tiny_tokenizer, [str(tmp_path / "missing")], common="none", progress=False)
    # the saved configuration drives the proposer as vLLM's worker would build it (from the environment)
    monkeypatch.setenv(CONFIG_ENV, str(config.save(tmp_path / "proposer.json")))
    proposer = FastCoderProposer(None, num_speculative_tokens=4)
    assert proposer.config == ProposerConfig.load(tmp_path / "proposer.json")
    import numpy as np
    from types import SimpleNamespace

    biggest = max(PLUGGY.glob("*.py"), key=lambda p: p.stat().st_size)
    ids = tiny_tokenizer(biggest.read_text(), add_special_tokens=False)["input_ids"]
    n = min(len(ids) // 2, 1500)
    buf = np.zeros((2, 2048), np.int32)
    buf[0, :n] = ids[:n]
    buf[1, :n] = ids[:n]
    runner = SimpleNamespace(input_batch=SimpleNamespace(req_ids=["a", "b"]), requests={
        "a": SimpleNamespace(sampling_params=SimpleNamespace(extra_args={REPO_ARG: str(PLUGGY) + "/"}),
                             num_prompt_tokens=n - 1),
        "b": SimpleNamespace(sampling_params=SimpleNamespace(extra_args={REPO_ARG: "plug"}), num_prompt_tokens=n - 1)})
    proposer.attach_runner(runner)
    out = proposer.propose([[ids[n - 1]], [ids[n - 1]]], np.array([n, n]), buf)
    assert out[0] == out[1] and len(out[0]) >= 1  # folder (as spelled, trailing slash) and name: one D_r
    assert proposer.stats()["errors"] == 0


def test_repository_datastores_built_elsewhere_are_served_under_their_id(tiny_tokenizer, tmp_path, monkeypatch):
    from engine.common_datastore import tokenizer_fingerprint
    from engine.datastore import Datastore

    monkeypatch.setenv("FASTCODER_CACHE_DIR", str(tmp_path / "cache"))
    ids = tiny_tokenizer((PLUGGY / "_hooks.py").read_text(), add_special_tokens=False)["input_ids"]
    built = Datastore.from_documents([ids], len(tiny_tokenizer), tokenizer_fingerprint(tiny_tokenizer))
    shared = built.save(tmp_path / "shared" / "plug")  # as `fastcoder index build --repo DIR --out PATH` writes it
    (shared / "repo.json").write_text(json.dumps({"repo_id": "team/pluggy"}))
    config = serve_vllm.prepare_config(tiny_tokenizer, [], common="none", progress=False,
                                       repo_datastores=[str(shared), f"alias={shared}"])
    assert config.repos == {"team/pluggy": str(shared), "alias": str(shared)}
    other = Datastore.from_documents([ids], len(tiny_tokenizer), "another-tokenizer").save(tmp_path / "other")
    with pytest.raises(serve_vllm.ServeError, match="tokenizer.*fastcoder index build --repo"):
        serve_vllm.prepare_config(tiny_tokenizer, [], common="none", progress=False, repo_datastores=[str(other)])
    with pytest.raises(serve_vllm.ServeError, match="--repo-datastore"):
        serve_vllm.prepare_config(tiny_tokenizer, [], common="none", progress=False,
                                  repo_datastores=[str(tmp_path / "missing")])


def test_a_relative_local_model_reaches_vllm_as_an_absolute_path(tmp_path, monkeypatch):
    # vLLM runs in its state folder: a relative model folder would be read as a hub id there
    monkeypatch.chdir(ROOT)
    rel = Path("tests")
    assert serve_vllm.local_or_hub(str(rel)) == os.path.abspath(rel)
    assert serve_vllm.local_or_hub("Qwen/Qwen2.5-Coder-1.5B") == "Qwen/Qwen2.5-Coder-1.5B"
    captured = {}

    class _Popen:
        def __init__(self, cmd, **kw):
            captured["cmd"], self.pid = cmd, 0

    monkeypatch.setattr(serve_vllm, "vllm_executable", lambda venv=None: Path("/v/bin/vllm"))
    monkeypatch.setattr(serve_vllm.subprocess, "Popen", _Popen)
    config = ProposerConfig(tokenizer=str(rel))
    serve_vllm.start_server(str(rel), 8123, speculation="fastcoder", config=config, state_dir=tmp_path / "s")
    assert captured["cmd"][2] == os.path.abspath(rel)
    assert ProposerConfig.load(tmp_path / "s" / "proposer.json").tokenizer == os.path.abspath(rel)
    # a symlinked folder keeps its spelling: vLLM serves the model under the name clients were given
    (tmp_path / "link").symlink_to(ROOT / "tests")
    assert serve_vllm.local_or_hub(str(tmp_path / "link")) == str(tmp_path / "link")
