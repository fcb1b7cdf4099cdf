"""Benchmark harness: repository-level code generation with every decoding method (issue #3).

Tasks come from a real repository, as in RepoEval / DevEval function-level completion: a function
whose body has at least ``min_body_lines`` lines is picked (seeded, deterministic); the prompt is the
file's text before the body (left-truncated to a token budget); the target is the model's own greedy
continuation of ``max_new_tokens`` tokens. The repository datastore D_r is built with the target body
removed from its file, so retrieval cannot copy the answer (no leakage).

Besides these ``function`` tasks, ``--task-kind fim-line`` / ``fim-block`` run the language server's
workload: a cursor inside a body line or at a body start, a FIM prompt (prefix and suffix), and the
server's stop strings (end of line / first blank line); see :mod:`.tasks`. Per method the harness then
also reports prefill ms, decode ms and end-to-end ms per completion.

All methods run in one process, interleaved per task (so machine noise hits them alike), after a
warm-up. Per method the harness reports decode ms per new token, speedup vs ``ar`` (same run), mean
accepted length (tokens committed per decode forward, bonus token included; Spec-Bench convention),
forward passes, retrieval ms per step and its share of decode time, accepted draft tokens per draft
source, peak RSS, and ``lossless`` (every output token-identical to ``ar``'s).

Headroom (see notes/speculative-decoding-anchors.md, sections 9-10):

* verify-cost curve ``c(n) = T(n) / T(1)``: time of one forward over ``n`` new tokens under a tree
  (4-D additive) mask on top of a typical prompt, divided by a 1-token forward.
* retrieval ceiling: the ``ar`` transcripts replayed against the union of all draft sources; each
  transcript is split greedily into the longest pieces any drafter could have proposed (+1 bonus token
  per piece); ``tokens / pieces`` bounds the mean accepted length of these exact-match drafters.
* predicted speedup ``accepted length / c(tree size + 1)`` next to the measured one.

Modules: :mod:`.tasks` (task extraction), :mod:`.runner` (timed runs, records, summaries),
:mod:`.headroom` (c(n), retrieval ceiling, predictions), :mod:`.report` (whole run, markdown),
:mod:`.cli` (command line), :mod:`.plot` (PNG). Every public name is importable from ``engine.bench``.

Usage: ``python -m engine.bench --model M --repo DIR --tasks 10 --max-new-tokens 128 --json OUT``
(or ``fastcoder bench ...``). This module imports nothing from ``lsp_server``.
"""

from __future__ import annotations

from .tasks import (  # noqa: F401
    FIM_LINE_CURSOR_AFTER,
    FIM_SUFFIX_FRACTION,
    TASK_KINDS,
    TASK_STOPS,
    build_fim_ids,
    heal_task,
    pick_line_cursor,
    DEFAULT_MAX_PROMPT_TOKENS,
    _SKIP_DIRS,
    BenchError,
    FunctionSpan,
    Task,
    _line_starts,
    _is_docstring,
    find_functions,
    _body_span,
    iter_python_files,
    _read_text,
    extract_tasks,
    _make_task,
)
from .runner import (  # noqa: F401
    cut_at_stop,
    METHOD_SPECS,
    SDSAT_BENCH_METHODS,
    DEFAULT_METHODS,
    REFERENCE_METHOD,
    DEFAULT_COST_SIZES,
    HIT_SOURCES,
    reset_peak_rss,
    peak_rss_mb,
    BenchConfig,
    parse_methods,
    DRAFTING_METHODS,
    _CACHED_METHODS,
    _ESTIMATORS,
    _new_estimator,
    make_decoder,
    run_one,
    _first_divergence,
    task_record,
    warm_up,
    failed_run,
    fresh_drafter_state,
    rotate,
    run_order,
    build_repo_datastore,
    memoized,
    run_tasks,
    histogram,
    summarize_method,
    summarize,
)
from .headroom import (  # noqa: F401
    measure_verify_cost,
    _tree_inputs,
    _time_forward,
    interpolate_cost,
    greedy_pieces,
    prompt_lookup_match,
    _ReplayDrafter,
    make_ceiling_drafters,
    retrieval_ceiling,
    predicted_speedups,
    headroom,
)
from .report import (  # noqa: F401
    SCHEMA,
    environment,
    engine_revision,
    benchmark,
    spread,
    REPEAT_FIELDS,
    _fmt,
    render_markdown,
    _lossless_cell,
    _headroom_markdown,
)
from .cli import (  # noqa: F401
    add_arguments,
    _default_prompt_budget,
    run,
    _load_common,
    _datastore_sizes,
    _num_tokens,
    write_outputs,
    main,
)

__all__ = ['FIM_LINE_CURSOR_AFTER', 'FIM_SUFFIX_FRACTION', 'TASK_KINDS', 'TASK_STOPS', 'build_fim_ids', 'heal_task', 'pick_line_cursor', 'cut_at_stop', 'DEFAULT_MAX_PROMPT_TOKENS', 'BenchError', 'FunctionSpan', 'Task', 'find_functions', 'iter_python_files', 'extract_tasks', 'METHOD_SPECS', 'SDSAT_BENCH_METHODS', 'DEFAULT_METHODS', 'REFERENCE_METHOD', 'DEFAULT_COST_SIZES', 'HIT_SOURCES', 'reset_peak_rss', 'peak_rss_mb', 'BenchConfig', 'parse_methods', 'DRAFTING_METHODS', 'make_decoder', 'run_one', 'task_record', 'warm_up', 'failed_run', 'rotate', 'run_order', 'build_repo_datastore', 'memoized', 'run_tasks', 'histogram', 'summarize_method', 'summarize', 'measure_verify_cost', 'interpolate_cost', 'greedy_pieces', 'prompt_lookup_match', 'make_ceiling_drafters', 'retrieval_ceiling', 'predicted_speedups', 'headroom', 'SCHEMA', 'environment', 'engine_revision', 'benchmark', 'render_markdown', 'add_arguments', 'run', 'write_outputs', 'main']
