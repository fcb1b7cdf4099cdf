"""``fastcoder-lsp`` / ``python -m lsp_server``: run the fastcoder language server (stdio by default).

Logs go to stderr only; stdout carries nothing but the LSP protocol.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


#: Python's GIL switch interval in the server (seconds; the interpreter's default is 0.005).
GIL_SWITCH_INTERVAL_S = 0.0005
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def default_threads() -> int:
    """torch's threads for the server when ``OMP_NUM_THREADS`` is not set: the CPUs this process may run on, less
    one, at least 1.

    Every forward waits for its slowest thread, so a core that another program keeps busy (a build, the editor)
    stalls each parallel region: on a 2-core machine with one core busy the server's load took 198 s and more on
    both cores against 16 s on one, and on the machine as shared as it was the headless demo answered p50 184-190 ms on
    one thread against 274-289 ms on two (benchmarks/HISTORY.md, "Update 2026-11-26 (09:27-)"). One core is left
    for the rest of the machine."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus - 1)


def set_default_threads() -> str:
    """Set ``OMP_NUM_THREADS`` to :func:`default_threads` unless the user set it; returns the value in force. Called
    before torch is imported (torch reads the variable once)."""
    return os.environ.setdefault("OMP_NUM_THREADS", str(default_threads()))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options: ``--tcp PORT`` (debugging), ``--host``, ``--log-level`` (default
    ``$FASTCODER_LOG_LEVEL``, so an editor's server environment setting can turn on DEBUG); an unknown level in
    the variable logs at INFO after a message on stderr (the server still starts)."""
    parser = argparse.ArgumentParser(prog="fastcoder-lsp", description="fastcoder inline-completion language server")
    parser.add_argument("--stdio", action="store_true", help="speak LSP over stdin/stdout (the default)")
    parser.add_argument("--tcp", type=int, metavar="PORT", help="listen on a TCP port instead of stdio")
    parser.add_argument("--host", default="127.0.0.1", help="TCP host (with --tcp)")
    level = os.environ.get("FASTCODER_LOG_LEVEL", "").strip() or "INFO"  # upper-cased by ``type``, as the flag
    parser.add_argument("--log-level", default=level, type=str.upper, choices=LOG_LEVELS,
                        help="level of the stderr log (the pygls logger stays at WARNING); default "
                             "$FASTCODER_LOG_LEVEL, else INFO")
    args = parser.parse_args(argv)
    if args.log_level not in LOG_LEVELS:  # only the environment's value can get here: start anyway
        print(f"fastcoder-lsp: FASTCODER_LOG_LEVEL={args.log_level!r} is not one of {', '.join(LOG_LEVELS)}; "
              "logging at INFO", file=sys.stderr)
        args.log_level = "INFO"
    return args


def _preimport_engine() -> None:
    try:
        import engine.decoder  # noqa: F401, PLC0415 (imported for its side effect: torch, transformers)
    except Exception as exc:  # reported properly when the model loads
        logging.getLogger("fastcoder.lsp").debug("pre-import of engine failed: %s", exc)


def configure_logging(level: str) -> None:
    """The stderr log (the editor's output channel): ``level`` for fastcoder's own loggers (``fastcoder.*``,
    ``engine.*``, ``lsp_server.*``); at DEBUG the libraries stay at INFO (watchdog and asyncio would flood it) and
    pygls at WARNING always."""
    logging.basicConfig(stream=sys.stderr, level=max(logging.INFO, getattr(logging, level)),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("fastcoder", "engine", "lsp_server"):
        logging.getLogger(name).setLevel(getattr(logging, level))
    logging.getLogger("pygls").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fastcoder-lsp`` console script; returns the exit status."""
    args = parse_args(argv)
    set_default_threads()
    configure_logging(args.log_level)
    from .server import create_server  # noqa: PLC0415 (after logging is configured)

    # Indexing threads run Python loops while the model worker runs a forward pass, which hands the
    # GIL back and forth hundreds of times; at the default 5 ms switch interval each hand-off can
    # cost up to 5 ms (a 20 ms completion took 1.6 s during a 5,000-file checkout).
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)

    server = create_server()
    # warm the heavy imports (torch, transformers) while the client starts and initializes; on the
    # single loader thread, so the model load queues behind it (two threads importing transformers
    # at once can fail inside its lazy module)
    server.host.loader_pool.submit(_preimport_engine)
    if args.tcp is not None:
        server.start_tcp(args.host, args.tcp)
        return 0
    server.start_io()
    return server.exit_code


def _exit_now(code: int) -> None:
    """Exit without waiting for worker threads: one stuck in a blocking read (a FIFO in the
    workspace, a hung file system) must not keep the process alive after ``exit``."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed by the transport already
            pass
    os._exit(code)


def run() -> None:
    """The ``fastcoder-lsp`` console script: :func:`main`, then exit at once with its status."""
    _exit_now(main())


if __name__ == "__main__":
    run()
