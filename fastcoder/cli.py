"""``fastcoder``: every command in one parser.

The engine's commands come from :func:`engine.cli.add_commands`; each entry of :data:`COMMANDS`
names a module whose ``add_command(subparsers)`` registers one more (imported only when the
parser is built, so ``fastcoder generate`` does not import the language server's client).
"""

from __future__ import annotations

import importlib
import sys

from engine import cli as engine_cli

#: Modules with an ``add_command(subparsers)`` function, registered after the engine's commands.
COMMANDS = (
    "lsp_server.demo",
    "lsp_server.bench_latency",
)


def _registrars():
    for name in COMMANDS:
        module = importlib.import_module(name)
        yield module.add_command


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fastcoder`` console script; returns the exit status."""
    return engine_cli.main(argv, extra=tuple(_registrars()))


if __name__ == "__main__":
    sys.exit(main())
