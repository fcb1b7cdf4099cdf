"""What this folder's in-process A/B scripts share: extra bench methods that run fastcoder with one piece of the engine
switched to another version, interleaved per task with fastcoder itself (the bench runs every method on a task before
the next), per-call times of that piece printed per variant at exit, then the bench's own command line."""
import atexit
import subprocess
import sys
import textwrap
from collections import defaultdict

import numpy as np

from engine.bench import runner


def run(variants: list[str], switch, label: str) -> None:
    """Register ``variants`` (method names besides ``fastcoder``) as fastcoder, call ``switch(name)`` before each
    generation's run (``fastcoder`` after it), and run ``python -m engine`` with this process's arguments. Returns the
    dict ``switch`` should append per-call seconds to, keyed by variant (``times[current[0]]``)."""
    for name in variants:
        runner.METHOD_SPECS[name] = runner.METHOD_SPECS["fastcoder"]
    run_one = runner.run_one

    def run_one_toggled(decoder, method, *args, **kwargs):
        switch(method if method in variants else "fastcoder")
        try:
            return run_one(decoder, method, *args, **kwargs)
        finally:
            switch("fastcoder")

    runner.run_one = run_one_toggled

    @atexit.register
    def report():
        for name, v in TIMES.items():
            v = np.array(v) * 1e6
            print(f"{name}: {label} n={len(v)} mean {v.mean():.1f} us, p50 {np.median(v):.1f}, "
                  f"p90 {np.percentile(v, 90):.1f}", file=sys.stderr)

    from engine.cli import main  # noqa: PLC0415

    sys.argv = ["engine"] + sys.argv[1:]
    main()


def old_function(commit: str, path: str, start: str, end: str, module) -> object:
    """The function whose source in ``path`` at ``commit`` runs from the line starting ``start`` to ``end``
    (exclusive), compiled in ``module``'s namespace (a method's source dedented: its class's function)."""
    src = subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True, check=True).stdout
    code = textwrap.dedent(src[src.index(start):src.index(end)])
    namespace = dict(vars(module))
    exec(compile(code, f"{path}@{commit}", "exec"), namespace)
    return namespace[start.split("def ", 1)[1].split("(", 1)[0]]


#: Per-call seconds by variant, appended by the scripts' timed wrappers.
TIMES: dict[str, list[float]] = defaultdict(list)
