"""The engine's commands (generate, index build, bench), registered into the ``fastcoder`` command.

The top-level :mod:`fastcoder.cli` composes these with the commands that need the language server
(``demo``, ``bench-latency``): the engine never imports ``lsp_server``. ``python -m engine`` runs the
engine's commands alone.

Errors a person can fix (a model that does not load, a bad datastore, a missing file) print one
line on stderr and exit with status 2; no traceback wall.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from pathlib import Path

from .decoder import METHODS

#: Methods that draft from the common datastore D_c / the repository datastore D_r.
COMMON_METHODS = ("rest", "fastcoder", "fastcoder+sdsat")
REPO_METHODS = ("fastcoder", "fastcoder+sdsat")


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None,
                   help="model folder or hub id (default: $FASTCODER_MODEL, else the built-in default)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | mps (default: auto)")
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16 (default: auto)")


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="generate a continuation with a decoding method",
                       description="Generate a continuation of a prompt file, or of a file at a line/column.")
    _add_model_args(p)
    p.add_argument("--method", default="fastcoder", choices=METHODS)
    p.add_argument("--repo", type=Path, help="repository folder for the repository datastore D_r")
    p.add_argument("--common", default="stdlib",
                   help="common datastore D_c: a datastore folder, 'stdlib' (built and cached on first use) "
                        "or 'none' (default: stdlib)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt-file", type=Path, help="file whose whole text is the prompt")
    src.add_argument("--file", type=Path, help="file to continue at --line/--column")
    p.add_argument("--line", type=int, help="1-based line of the cursor (with --file)")
    p.add_argument("--column", type=int,
                   help="1-based column of the cursor (default: the end of the line)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print one JSON object (text, token_ids, stats)")
    p.set_defaults(func=cmd_generate)


def _add_index(sub) -> None:
    p = sub.add_parser("index", help="build datastores")
    isub = p.add_subparsers(dest="index_command", required=True)
    b = isub.add_parser("build", help="build the common datastore D_c, or a repository's D_r (--repo)",
                        description="Tokenize a corpus with the model's tokenizer and build its suffix-array "
                                    "datastore. With no --corpus: the running Python's standard library. With "
                                    "--repo: the repository datastore D_r of that folder (its source files, "
                                    ".gitignore respected), saved where a completion server reads it (fastcoder's "
                                    "vLLM proposer, which the language server's openai backend names with "
                                    "fastcoder.repoId).")
    _add_model_args(b)
    src = b.add_mutually_exclusive_group()
    src.add_argument("--corpus", type=Path, default=None, help="folder of source files (default: the stdlib)")
    src.add_argument("--repo", type=Path, default=None, help="repository folder: build its D_r")
    src.add_argument("--model-outputs", type=Path, action="append", default=None, metavar="DIR",
                     help="build a D_c of the model's own greedy output at sampled positions of the source files "
                          "under DIR (repeatable; leave out the code you will complete in), for --common PATH "
                          "(engine/model_outputs.py)")
    b.add_argument("--samples", type=int, default=4000, help="with --model-outputs: generations (default: 4000)")
    b.add_argument("--new-tokens", type=int, default=64,
                   help="with --model-outputs: tokens per generation at most (default: 64)")
    b.add_argument("--repo-id", default=None,
                   help="with --repo: the id requests send as fastcoder_repo (default: the folder's name)")
    b.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="with --repo: gitignore-style glob to leave out (repeatable)")
    b.add_argument("--out", type=Path, default=None,
                   help="output folder (default: the user cache; with --repo: <cache>/repos/<repo id>)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_index_build)


def _add_bench(sub) -> None:
    try:
        bench = importlib.import_module("engine.bench")
    except ImportError as err:  # the harness is optional at import time
        logging.getLogger(__name__).debug("bench unavailable: %s", err)
        return
    p = sub.add_parser("bench", help="benchmark decoding methods on a repository",
                       description="Every method side by side on functions of a real repository.")
    bench.add_arguments(p)
    p.set_defaults(func=lambda args: bench.run(args))


def _add_serving(sub) -> None:
    """``serve-vllm`` and ``bench-serving`` (:mod:`engine.serving`; vLLM itself lives in its own venv)."""
    for name in ("engine.serving.serve_vllm", "engine.serving.bench_serving"):
        importlib.import_module(name).add_command(sub)


def add_commands(sub) -> None:
    """Register the engine's subcommands on an ``argparse`` subparsers object."""
    _add_generate(sub)
    _add_index(sub)
    _add_bench(sub)
    try:
        from .bench.fit_prior import add_command as add_fit_prior  # noqa: PLC0415
    except ImportError as err:  # the harness is optional at import time
        logging.getLogger(__name__).debug("fit-acceptance-prior unavailable: %s", err)
    else:
        add_fit_prior(sub)
        from .bench.fit_head import add_command as add_fit_head  # noqa: PLC0415

        add_fit_head(sub)
        from .bench.fit_outputs import add_command as add_build_output_store  # noqa: PLC0415

        add_build_output_store(sub)
    _add_serving(sub)
    from .sdsat.cli import add_commands as add_sdsat_commands  # noqa: PLC0415

    add_sdsat_commands(sub)


def build_parser(extra=()) -> argparse.ArgumentParser:
    """The ``fastcoder`` parser: the engine's commands plus ``extra`` (callables taking the subparsers)."""
    parser = argparse.ArgumentParser(prog="fastcoder",
                                     description="Lossless retrieval-based speculative decoding for code LLMs.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    add_commands(sub)
    for register in extra:
        register(sub)
    return parser


def _load(args):
    from .model import ModelLoadError, load_model

    try:
        return load_model(args.model, device=args.device, dtype=args.dtype)
    except ModelLoadError as err:
        raise CLIError(str(err)) from None


def _load_common(tokenizer, spec: str):
    from .common_datastore import load_common_datastore
    from .datastore import DatastoreError

    try:
        return load_common_datastore(tokenizer, spec, build_if_missing=True, progress=True)
    except DatastoreError as err:
        raise CLIError(f"common datastore {spec!r}: {err}") from None


def read_prompt(args) -> str:
    """The prompt text: the whole --prompt-file, or --file up to the cursor at --line/--column."""
    path = args.prompt_file or args.file
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CLIError(f"cannot read {path}: {err}") from None
    if args.prompt_file:
        return text
    if args.line is None:
        raise CLIError("--file needs --line (1-based)")
    lines = text.splitlines(keepends=True)
    if not 1 <= args.line <= max(len(lines), 1):
        raise CLIError(f"--line {args.line} is outside {path} ({len(lines)} lines)")
    line = lines[args.line - 1] if lines else ""
    body = line.rstrip("\r\n")
    col = len(body) + 1 if args.column is None else args.column
    if not 1 <= col <= len(body) + 1:
        raise CLIError(f"--column {col} is outside line {args.line} ({len(body)} characters)")
    return "".join(lines[: args.line - 1]) + body[: col - 1]


def cmd_generate(args) -> int:
    from . import SpeculativeDecoder
    from .suffix_drafter import SuffixDecodingUnavailable

    prompt = read_prompt(args)
    loaded = _load(args)
    common = _load_common(loaded.tokenizer, args.common) if args.method in COMMON_METHODS else None
    repo = None
    if args.repo is not None and args.method in REPO_METHODS:
        from .repo_datastore import RepoDatastore

        if not args.repo.is_dir():
            raise CLIError(f"--repo {args.repo} is not a folder")
        repo = RepoDatastore.build(args.repo, loaded.tokenizer)
    try:
        decoder = SpeculativeDecoder(loaded, method=args.method, repo_datastore=repo, common_datastore=common)
        result = decoder.generate(prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                  top_p=args.top_p, top_k=args.top_k, seed=args.seed)
    except (ValueError, SuffixDecodingUnavailable) as err:  # the latter: method suffix without arctic-inference
        raise CLIError(str(err)) from None
    if args.json:
        json.dump({"text": result.text, "token_ids": result.token_ids, "finish_reason": result.finish_reason,
                   "stats": result.stats}, sys.stdout)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(result.text + "\n")
        s = result.stats
        print(f"[{args.method}] {s['new_tokens']} tokens, {s['forward_passes']} forward passes, "
              f"mean accepted length {s['mean_accepted_length']:.2f}, prefill {s['prefill_ms']:.0f} ms, "
              f"decode {s['decode_ms']:.0f} ms, retrieval {s['retrieval_ms']:.1f} ms", file=sys.stderr)
    return 0


def cmd_index_build(args) -> int:
    from .common_datastore import build_common_datastore

    if args.repo is not None:
        return _index_build_repo(args)
    if args.model_outputs:
        return _index_build_model_outputs(args)
    if args.corpus is not None and not args.corpus.is_dir():
        raise CLIError(f"--corpus {args.corpus} is not a folder")
    loaded = _load(args)
    return _report_build(args, lambda: build_common_datastore(loaded.tokenizer, corpus=args.corpus, out=args.out,
                                                              progress=True))


def _report_build(args, build, hint: str = "") -> int:
    """Run ``build()`` (returns the datastore folder; DatastoreError -> CLIError) and print the folder and the
    seconds taken (``--json``: one object), ``hint`` after the seconds."""
    import time

    from .datastore import DatastoreError

    t0 = time.perf_counter()
    try:
        out = build()
    except DatastoreError as err:
        raise CLIError(str(err)) from None
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"path": str(out), "seconds": round(seconds, 2)}))
    else:
        print(out)
        print(f"built in {seconds:.1f} s{hint.format(path=out)}", file=sys.stderr)
    return 0


def _index_build_model_outputs(args) -> int:
    """``index build --model-outputs DIR...``: a D_c of the model's own output (:mod:`engine.model_outputs`),
    saved to --out or ``<cache>/datastores/<tokenizer>-outputs-<settings hash>``; prints the folder."""
    import hashlib

    from .common_datastore import default_cache_dir, tokenizer_fingerprint
    from .model_outputs import OutputSampling, build_model_output_datastore

    try:
        sampling = OutputSampling(samples=args.samples, new_tokens=args.new_tokens)
    except ValueError as err:
        raise CLIError(str(err)) from None
    for folder in args.model_outputs:
        if not folder.is_dir():
            raise CLIError(f"--model-outputs {folder} is not a folder")
    loaded = _load(args)
    out = args.out
    if out is None:
        key = repr((sorted(str(f.resolve()) for f in args.model_outputs), sampling, args.model))
        out = default_cache_dir() / (f"{tokenizer_fingerprint(loaded.tokenizer)}-outputs-"
                                     f"{hashlib.sha256(key.encode()).hexdigest()[:16]}")
    return _report_build(args, lambda: build_model_output_datastore(loaded, args.model_outputs, out, sampling,
                                                                    progress=True), "; use it with --common {path}")


#: File written beside a saved D_r's meta.json by ``index build --repo``: {"repo_id", "root", ...}.
REPO_INFO_FILE = "repo.json"


def _index_build_repo(args) -> int:
    """``index build --repo DIR``: build DIR's D_r and save it (a :class:`engine.datastore.Datastore`
    folder plus ``repo.json``) to --out or ``<cache>/repos/<repo id>``; prints the folder and the id."""
    import re
    import time

    from .common_datastore import default_cache_dir, tokenizer_fingerprint
    from .datastore import DatastoreError
    from .repo_datastore import RepoDatastore

    root = args.repo.expanduser().resolve()
    if not root.is_dir():
        raise CLIError(f"--repo {args.repo} is not a folder")
    repo_id = (args.repo_id or root.name).strip()
    if not repo_id:
        raise CLIError("--repo-id is empty")
    out = args.out or default_cache_dir() / "repos" / re.sub(r"[^A-Za-z0-9._-]+", "_", repo_id)
    loaded = _load(args)
    t0 = time.perf_counter()
    try:
        repo = RepoDatastore.build(root, loaded.tokenizer, exclude=args.exclude)
        fingerprint = tokenizer_fingerprint(loaded.tokenizer)
        path = repo.to_datastore(fingerprint).save(out)
    except (DatastoreError, OSError) as err:
        raise CLIError(str(err)) from None
    info = {"repo_id": repo_id, "root": str(root), "path": str(path), "files": repo.num_files,
            "tokens": repo.num_tokens, "tokenizer_fingerprint": fingerprint, "model": loaded.name,
            "seconds": round(time.perf_counter() - t0, 2)}
    (path / REPO_INFO_FILE).write_text(json.dumps(info, indent=1))
    if args.json:
        print(json.dumps(info))
    else:
        print(path)
        print(f"repository {repo_id!r}: {repo.num_files} files, {repo.num_tokens} tokens, built in "
              f"{info['seconds']:.1f} s", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None, extra=()) -> int:
    """Parse ``argv`` and run the command; returns the exit status (2 for a :class:`CLIError`).

    ``extra``: more command registrars (see :func:`build_parser`), as :mod:`fastcoder.cli` passes.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(extra)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int(args.func(args) or 0)
    except CLIError as err:
        print(f"fastcoder: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
