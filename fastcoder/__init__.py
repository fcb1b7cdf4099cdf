"""The ``fastcoder`` command line: composes the engine's commands with the language server's.

``engine`` decodes and never imports ``lsp_server``; commands that need both (``demo``,
``bench-latency``) are registered here, where both packages can be imported.
"""
