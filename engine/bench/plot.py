"""Plots for the benchmark result (``engine.bench``): matplotlib with the Agg backend (no display).

One PNG, four panels: decode speedup vs ``ar`` per method; mean accepted length per method (with
the retrieval ceiling as a line); the accepted-length histogram (share of decode forwards committing
k tokens); and the verify-cost curve c(n) with the line c(n) = n (no batching gain).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend chosen first)


def _bar(ax, names: list[str], values: list[float | None], title: str, ylabel: str, ref: float | None = None,
         ref_label: str = "") -> None:
    xs = range(len(names))
    heights = [v or 0.0 for v in values]
    bars = ax.bar(xs, heights, color="#4c72b0")
    for rect, v in zip(bars, values):
        ax.annotate("-" if v is None else f"{v:.2f}", (rect.get_x() + rect.get_width() / 2, rect.get_height()),
                    ha="center", va="bottom", fontsize=7)
    if ref is not None:
        ax.axhline(ref, color="#c44e52", linestyle="--", linewidth=1, label=ref_label)
        ax.legend(fontsize=7, loc="upper left")
    ax.set_xticks(list(xs), names, rotation=35, ha="right", fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=8)


def _histogram(ax, methods: dict) -> None:
    for name, m in methods.items():
        hist = m.get("accepted_length_histogram")
        if not hist or name == "ar":
            continue
        total = sum(hist.values())
        ks = sorted(int(k) for k in hist)
        ax.plot(ks, [hist[str(k)] / total for k in ks], marker="o", markersize=3, linewidth=1, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("tokens committed per forward", fontsize=8)
    ax.set_ylabel("share of decode forwards", fontsize=8)
    ax.set_title("Accepted-length histogram", fontsize=9)
    if ax.lines:
        ax.legend(fontsize=6)


def _cost(ax, head: dict | None) -> None:
    ax.set_title("Verify cost c(n) = T(n) / T(ar step)", fontsize=9)
    if not head or not head.get("verify_cost"):
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        return
    cost = head["verify_cost"]
    ax.plot(cost["n"], cost["c"], marker="o", label=f"measured ({cost['prompt_tokens']}-token prompt)")
    ax.plot(cost["n"], cost["n"], linestyle=":", color="grey", label="c(n) = n")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("tokens in one forward (n)", fontsize=8)
    ax.legend(fontsize=7)


def plot_result(result: dict, out_path: str | Path) -> Path:
    """Draw the benchmark ``result`` (the JSON dict from :func:`engine.bench.benchmark`) to a PNG.

    Returns:
        the path written. Raises ``OSError`` if it cannot be written.
    """
    methods = result.get("methods", {})
    names = list(methods)
    head = result.get("headroom") or {}
    ceiling = (head.get("retrieval_ceiling") or {}).get("mean_accepted_length_bound")
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    _bar(axes[0][0], names, [methods[n].get("speedup") for n in names], "Decode speedup vs ar (same run)",
         "x", ref=1.0, ref_label="ar")
    _bar(axes[0][1], names, [methods[n].get("mean_accepted_length") for n in names],
         "Mean accepted length (tokens per forward)", "tokens", ref=ceiling,
         ref_label="retrieval ceiling" if ceiling is not None else "")
    _histogram(axes[1][0], methods)
    _cost(axes[1][1], head)
    cfg = result.get("config", {})
    if cfg:
        fig.suptitle(f"{Path(str(cfg.get('repo', ''))).name}: {len(result.get('tasks', []))} tasks, "
                     f"{cfg.get('max_new_tokens')} new tokens, model {Path(str(cfg.get('model', ''))).name}",
                     fontsize=10)
    fig.tight_layout()
    out_path = Path(out_path)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path
