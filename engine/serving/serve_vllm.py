"""``fastcoder serve-vllm``: vLLM (in its own venv) serving a model with fastcoder's proposer.

    fastcoder serve-vllm --model M [--repo DIR | --repo NAME=DIR ...] [--port P]

1. Builds (or reuses, from the user cache) each repository's datastore D_r and D_c with the model's
   tokenizer, here in fastcoder's venv: a saved :class:`engine.datastore.Datastore` per repository.
2. Writes the proposer's configuration (:class:`engine.serving.vllm_proposer.ProposerConfig`) and
   starts ``vllm serve`` from vLLM's venv (``scripts/setup_vllm.sh`` makes it;
   ``$FASTCODER_VLLM_VENV`` or ``--venv`` to use another) with
   ``--speculative-config {"method": "custom_class", "model": PROPOSER_CLASS, ...}`` and the worker
   class that hands the proposer the model runner (:mod:`engine.serving.vllm_worker`); fastcoder's
   own code reaches vLLM's processes through ``PYTHONPATH``. The worker memory-maps a repository's
   datastore when a request first names it: ``"vllm_xargs": {"fastcoder_repo": DIR}`` (the folder as
   given to ``--repo``, or its NAME).
3. Prints the endpoint (OpenAI-compatible, ``http://HOST:P/v1``) to put in the editor settings
   once vLLM answers ``/health``, then runs until interrupted and stops vLLM by PID.

``--speculation ngram|suffix|none`` starts the same server with vLLM's own methods (benchmarks).
On a machine without a GPU it runs vLLM's CPU build in float32 (``VLLM_CPU_KVCACHE_SPACE`` GiB of KV
cache, default 1). Start-up takes ~45-90 s on a 2-core CPU (a torch.compile warm-up).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .vllm_proposer import CONFIG_ENV, PROPOSER_CLASS, ProposerConfig

#: Where scripts/setup_vllm.sh puts vLLM's venv unless $FASTCODER_VLLM_VENV says otherwise.
VENV_ENV = "FASTCODER_VLLM_VENV"
SPECULATION = ("fastcoder", "ngram", "suffix", "none")
#: Folder holding ``engine/`` (put on vLLM's PYTHONPATH).
CODE_ROOT = Path(__file__).resolve().parents[2]

#: Longest TMPDIR for vLLM: a Unix socket path holds 107 bytes and zmq names its sockets with a uuid.
_IPC_DIR_MAX = 64


class ServeError(RuntimeError):
    """A problem a person can fix (no vLLM venv, a bad --repo, vLLM exiting early); one line."""


def default_venv() -> Path:
    env = os.environ.get(VENV_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "fastcoder-vllm" / "venv"


def vllm_executable(venv: str | os.PathLike | None = None) -> Path:
    """``bin/vllm`` of vLLM's venv; raises ServeError naming scripts/setup_vllm.sh when missing."""
    venv = Path(venv).expanduser() if venv else default_venv()
    exe = venv / "bin" / "vllm"
    if not exe.is_file():
        raise ServeError(f"no vLLM venv at {venv} (bin/vllm missing): run scripts/setup_vllm.sh "
                         f"(or set ${VENV_ENV})")
    return exe


def has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def parse_repo(spec: str) -> tuple[str, Path]:
    """``NAME=DIR`` or ``DIR`` (NAME: the folder's name) -> (name, resolved folder)."""
    name, sep, folder = spec.partition("=")
    if not sep or "/" in name:
        name, folder = "", spec
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise ServeError(f"--repo {spec}: {folder} is not a folder")
    return name or path.name, path


def parse_repo_datastore(spec: str) -> tuple[str | None, Path]:
    """``ID=PATH`` or ``PATH`` (a folder written by ``fastcoder index build --repo``) -> (id or None, folder)."""
    name, sep, folder = spec.partition("=")
    if not sep or "/" in name:
        name, folder = "", spec
    return (name.strip() or None), Path(folder).expanduser().resolve()


def prepare_config(tokenizer, repos: list[str], common: str = "stdlib", state_dir: str | os.PathLike | None = None,
                   options: dict | None = None, cost_slope: float | None = None, progress: bool = True,
                   tokenizer_path: str | None = None, repo_datastores: list[str] = ()) -> ProposerConfig:
    """Build or reuse the datastores (user cache) and return the proposer's configuration.

    Each repository is indexed with D_r's file filter (:func:`engine.common_datastore.build_common_datastore`
    on the folder) and cached under a fingerprint of the tokenizer and the files (paths, sizes, mtimes),
    so an unchanged repository is not rebuilt. Ids: the resolved folder and the name (``NAME=DIR``, or the
    folder's name). ``common``: ``stdlib`` (built on first use), ``none`` or a datastore folder.

    ``repo_datastores``: ``[ID=]PATH`` of D_r folders built elsewhere (``fastcoder index build --repo DIR
    --repo-id ID --out PATH`` on a developer's machine or in CI, then copied or shared); the id is ID, else
    the ``repo_id`` in the folder's ``repo.json``, else the folder's name. The proposer memory-maps it on
    first use and reloads it when the folder is rebuilt in place. Raises :class:`ServeError` for a folder
    that is not a datastore or was built with another tokenizer.
    """
    from ..common_datastore import (corpus_files, corpus_fingerprint, default_cache_dir, load_common_datastore,
                                    tokenizer_fingerprint, build_common_datastore)
    from ..cli import REPO_INFO_FILE
    from ..datastore import Datastore, DatastoreError

    fp = tokenizer_fingerprint(tokenizer)
    ids: dict[str, str] = {}
    for spec in repos:
        name, folder = parse_repo(spec)
        root, files = corpus_files(folder)
        out = default_cache_dir() / "repos" / f"{fp}-{corpus_fingerprint(root, files)}"
        try:
            Datastore.load(out, tokenizer_fingerprint=fp)
        except DatastoreError:
            t0 = time.perf_counter()
            try:
                build_common_datastore(tokenizer, corpus=folder, out=out, progress=progress)
            except DatastoreError as err:
                raise ServeError(f"--repo {spec}: {err}") from None
            if progress:
                print(f"fastcoder: indexed {folder} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        for key in (str(folder), name):
            if key in ids and ids[key] != str(out):
                raise ServeError(f"two --repo folders are both called {key!r}: name them (--repo NAME=DIR)")
            ids[key] = str(out)
    for spec in repo_datastores:
        rid, path = parse_repo_datastore(spec)
        try:
            Datastore.load(path, tokenizer_fingerprint=fp)
        except DatastoreError as err:
            raise ServeError(f"--repo-datastore {spec}: {err} (build it with: fastcoder index build --repo DIR "
                             f"--model {tokenizer_path or 'MODEL'} --out {path})") from None
        if rid is None:
            try:
                rid = json.loads((path / REPO_INFO_FILE).read_text(encoding="utf-8")).get("repo_id")
            except (OSError, ValueError, AttributeError):
                rid = None
            rid = str(rid or path.name)
        if rid in ids and ids[rid] != str(path):
            raise ServeError(f"--repo-datastore {spec}: the id {rid!r} is already taken; name it (ID=PATH)")
        ids[rid] = str(path)
    common_path = None
    spec = (common or "none").strip()
    if spec.lower() == "stdlib":
        load_common_datastore(tokenizer, "stdlib", build_if_missing=True, progress=progress)
        root, files = corpus_files(None)
        common_path = str(default_cache_dir() / f"{fp}-{corpus_fingerprint(root, files)}")
    elif spec.lower() not in ("none", ""):
        try:
            Datastore.load(spec, tokenizer_fingerprint=fp)
        except DatastoreError as err:
            raise ServeError(f"--common {spec}: {err}") from None
        common_path = str(Path(spec).expanduser().resolve())
    state = Path(state_dir) if state_dir else None
    config = ProposerConfig(repos=ids, common=common_path, tokenizer_fingerprint=fp, tokenizer=tokenizer_path,
                            options=dict(options or {}),
                            stats_path=str(state / "proposer-stats.json") if state else None)
    if cost_slope is not None:
        config.cost_slope = float(cost_slope)
    return config


def speculative_config(speculation: str, k: int) -> dict | None:
    """vLLM's ``--speculative-config`` for a method of :data:`SPECULATION` (None: no speculation)."""
    if speculation == "fastcoder":
        return {"method": "custom_class", "model": PROPOSER_CLASS, "num_speculative_tokens": k}
    if speculation == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    if speculation == "suffix":
        return {"method": "suffix", "num_speculative_tokens": k}
    if speculation == "none":
        return None
    raise ServeError(f"unknown speculation {speculation!r}; choose one of {', '.join(SPECULATION)}")


def local_or_hub(model: str) -> str:
    """An existing local folder as an absolute path (vLLM runs in its state folder, where a relative path
    would be read as a hub id); anything else (a hub id) unchanged. Symlinks are kept as spelled: vLLM
    serves the model under this name, and clients send the name they were given."""
    path = os.path.expanduser(model)
    return os.path.abspath(path) if os.path.exists(path) else model


def vllm_command(exe: Path, model: str, host: str, port: int, speculation: str, k: int, max_model_len: int,
                 dtype: str | None, extra: list[str] = ()) -> list[str]:
    """The ``vllm serve`` command line."""
    gpu = has_gpu()
    cmd = [str(exe), "serve", model, "--host", host, "--port", str(port), "--max-model-len", str(max_model_len),
           "--dtype", dtype or ("auto" if gpu else "float32"), "--seed", "0"]
    spec = speculative_config(speculation, k)
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec)]
    if speculation == "fastcoder":
        worker = "FastCoderGPUWorker" if gpu else "FastCoderCPUWorker"
        cmd += ["--worker-cls", f"engine.serving.vllm_worker.{worker}"]
    return cmd + list(extra)


def server_env(config_path: Path | None, state_dir: Path, base: dict | None = None) -> dict:
    """vLLM's environment: fastcoder's code on PYTHONPATH, the proposer's configuration, the legacy
    model runner (Model Runner V2 refuses ``custom_class``; every method runs on it, to compare like
    with like), and vLLM's caches and temporary files in ``state_dir``."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(CODE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if config_path is not None:
        env[CONFIG_ENV] = str(config_path)
    env.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
    env.setdefault("VLLM_CACHE_ROOT", str(state_dir / "vllm-cache"))
    if not has_gpu():
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return env


def _descendants(pid: int) -> list[int]:
    """PIDs of every live descendant of ``pid`` (from /proc; empty where /proc is absent)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@dataclass
class VllmServer:
    """A started ``vllm serve``: its process, base URL (``http://host:port``), log and state folder."""

    process: subprocess.Popen
    url: str
    log_path: Path
    state_dir: Path
    config: ProposerConfig | None = None
    pids: list[int] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``)."""
        return self.url + "/v1"

    def wait_ready(self, timeout: float = 300.0) -> float:
        """Block until ``/health`` answers 200; returns the seconds waited. Raises ServeError if vLLM
        exits first (with the log's last lines) or after ``timeout`` seconds."""
        t0 = time.monotonic()
        while True:
            if self.process.poll() is not None:
                raise ServeError(f"vLLM exited with status {self.process.returncode} before it was ready; "
                                 f"log {self.log_path}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.pids = _descendants(self.process.pid)
                        return time.monotonic() - t0
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() - t0 > timeout:
                raise ServeError(f"vLLM not ready after {timeout:.0f} s; log {self.log_path}:\n{self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def proposer_stats(self) -> dict | None:
        """The proposer's last written statistics (fastcoder speculation only), or None."""
        path = self.config.stats_path if self.config else None
        try:
            return json.loads(Path(path).read_text()) if path else None
        except (OSError, ValueError):
            return None

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to vLLM's API server by PID (it stops its engine and worker), then SIGKILL to it and
        to every process it had started that is still alive (by PID) after ``timeout`` seconds."""
        pids = sorted(set(self.pids) | set(_descendants(self.process.pid)))
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        deadline = time.monotonic() + 10
        for pid in pids:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def start_server(model: str, port: int, host: str = "127.0.0.1", speculation: str = "fastcoder",
                 config: ProposerConfig | None = None, k: int = 8, max_model_len: int = 2048,
                 dtype: str | None = None, venv: str | os.PathLike | None = None,
                 state_dir: str | os.PathLike | None = None, extra_args: list[str] = (),
                 env: dict | None = None) -> VllmServer:
    """Start ``vllm serve`` (not waiting for it: see :meth:`VllmServer.wait_ready`).

    ``config``: the proposer's configuration (fastcoder speculation), saved in ``state_dir`` (default: a
    folder per port in the user cache); vLLM's output goes to ``state_dir/vllm.log``.
    """
    exe = vllm_executable(venv)
    model = local_or_hub(model)
    if state_dir is None:
        from ..common_datastore import default_cache_dir

        state_dir = default_cache_dir().parent / "vllm" / f"serve-{port}"
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    config_path = None
    if speculation == "fastcoder":
        config = config or ProposerConfig()
        if config.tokenizer:
            config.tokenizer = local_or_hub(config.tokenizer)
        if config.stats_path is None:
            config.stats_path = str(state / "proposer-stats.json")
        config_path = config.save(state / "proposer.json")
    cmd = vllm_command(exe, model, host, port, speculation, k, max_model_len, dtype, list(extra_args))
    log_path = state / "vllm.log"
    tmp = state / "tmp"
    if len(str(tmp)) > _IPC_DIR_MAX:  # vLLM's zmq ipc:// sockets live in TMPDIR under 37-character names
        tmp = Path(tempfile.mkdtemp(prefix="fastcoder-vllm-"))
    tmp.mkdir(exist_ok=True)
    full_env = server_env(config_path, state, env)
    full_env.setdefault("TMPDIR", str(tmp))
    with open(log_path, "wb") as log:
        process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   env=full_env, cwd=str(state))
    return VllmServer(process, f"http://{host}:{port}", log_path, state, config if speculation == "fastcoder" else None)


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--model", required=True, help="model folder or hub id (vLLM loads it)")
    p.add_argument("--repo", action="append", default=[], metavar="[NAME=]DIR",
                   help="a repository whose datastore D_r requests may name (repeatable)")
    p.add_argument("--repo-datastore", action="append", default=[], metavar="[ID=]PATH",
                   help="a repository datastore built elsewhere by `fastcoder index build --repo DIR --out PATH` "
                        "(repeatable; reloaded when rebuilt in place)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--common", default="stdlib", help="D_c: 'stdlib', 'none' or a datastore folder (default: stdlib)")
    p.add_argument("--speculation", default="fastcoder", choices=SPECULATION,
                   help="fastcoder's proposer (default), vLLM's ngram or suffix, or none")
    p.add_argument("-k", "--num-speculative-tokens", type=int, default=8, help="longest draft chain (default 8)")
    p.add_argument("--cost-slope", type=float, default=None,
                   help="verify cost of an n-token chain, 1 + SLOPE*n decode steps (default 0.05)")
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--dtype", default=None, help="vLLM's --dtype (default: float32 on a CPU, auto on a GPU)")
    p.add_argument("--venv", default=None, help=f"vLLM's venv (default: ${VENV_ENV} or ~/.cache/fastcoder-vllm/venv)")
    p.add_argument("--state-dir", default=None, help="folder for the proposer's configuration and vLLM's log")
    p.add_argument("--vllm-arg", action="append", default=[], help="one more argument for `vllm serve` (repeatable)")
    p.add_argument("--ready-timeout", type=float, default=900.0,
                   help="seconds to wait for vLLM to answer /health (default 900: a busy 2-core machine is slow)")
    return p


def add_command(sub) -> None:
    p = sub.add_parser("serve-vllm", help="serve a model with vLLM and fastcoder's drafter",
                       description="Start vLLM (from scripts/setup_vllm.sh's venv) with fastcoder's proposer and "
                                   "the repositories' datastores; prints the endpoint for the editor settings.")
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..cli import CLIError  # noqa: PLC0415

    try:
        vllm_executable(args.venv)
        config = None
        if args.speculation == "fastcoder":
            from transformers import AutoTokenizer  # noqa: PLC0415

            try:
                tokenizer = AutoTokenizer.from_pretrained(args.model)
            except Exception as err:
                raise ServeError(f"cannot load the tokenizer of {args.model}: {err}") from None
            config = prepare_config(tokenizer, args.repo, args.common, options=None, cost_slope=args.cost_slope,
                                    tokenizer_path=args.model, repo_datastores=args.repo_datastore)
        server = start_server(args.model, args.port, args.host, args.speculation, config,
                              args.num_speculative_tokens, args.max_model_len, args.dtype, args.venv,
                              args.state_dir, args.vllm_arg)
    except ServeError as err:
        raise CLIError(str(err)) from None
    print(f"fastcoder: starting vLLM (pid {server.process.pid}, log {server.log_path}) ...", file=sys.stderr)

    def _terminate(signum, frame):  # SIGTERM (and SIGINT where a shell ignored it) stop vLLM too
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        try:
            waited = server.wait_ready(args.ready_timeout)
        except ServeError as err:
            raise CLIError(str(err)) from None
        repos = sorted({k for k in (config.repos if config else {}) if not os.path.isabs(k)})
        print(f"fastcoder: vLLM ready in {waited:.0f} s")
        print(f"endpoint: {server.endpoint}   (OpenAI-compatible; put it in the editor settings)")
        if repos:
            print(f'per request: "vllm_xargs": {{"fastcoder_repo": NAME or DIR}}   repositories: {", ".join(repos)}')
        sys.stdout.flush()
        server.process.wait()
        if server.process.returncode not in (0, -signal.SIGTERM):
            raise CLIError(f"vLLM exited with status {server.process.returncode}; log {server.log_path}")
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        server.stop()
