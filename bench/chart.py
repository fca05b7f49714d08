"""The two PNGs of docs/benchmarks.md, drawn with matplotlib (the `bench` extra) from a summary:

* benchmarks.png - ours / Kafka per scenario and headline metric, as horizontal bars on a log axis with the
  1.0 line; green where the ratio meets its goal direction, red where it misses (report.METRICS says which
  direction is good), a second bar for the BookKeeper-mode broker where it ran;
* benchmarks-offset-search.png - fetch time at a random offset against the topic's record count (log x), one
  line per broker: the offset search must stay logarithmic, i.e. the curve flat-ish on a log axis.

Agg backend: no display on CI machines.
"""

from __future__ import annotations

from pathlib import Path

from bench.report import METRICS, SEARCH_SIZES, is_good, rows

COLOURS = {"kafka": "#444444", "kop": "#1f77b4", "kop-bk": "#ff7f0e"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ratio_chart(summary: dict, path: Path, title: str) -> Path | None:
    """Bars of ours / Kafka for each headline metric that both brokers measured; None if there is none."""
    rs = [r for r in rows(summary) if METRICS[r["metric"]].headline and (r["ratio"] or r["ratio_bk"])]
    if not rs:
        return None
    plt = _plt()
    labels, vals, cols, bk_vals = [], [], [], []
    for r in rs:
        labels.append(f"{r['scenario']}: {METRICS[r['metric']].label}")
        vals.append(r["ratio"])
        cols.append({True: "#2ca02c", False: "#d62728", None: "#999999"}[is_good(r["metric"], r["ratio"])])
        bk_vals.append(r["ratio_bk"])
    n = len(rs)
    fig, ax = plt.subplots(figsize=(11, max(3.0, 0.28 * n + 1.5)))
    y = list(range(n))
    has_bk = any(v is not None for v in bk_vals)
    h = 0.4 if has_bk else 0.7
    ax.barh([i - (h / 2 if has_bk else 0) for i in y], [v or 0 for v in vals], height=h, color=cols,
            label="kop (embedded storage) / Kafka")
    if has_bk:
        ax.barh([i + h / 2 for i in y], [v or 0 for v in bk_vals], height=h, color=COLOURS["kop-bk"],
                label="kop on BookKeeper / Kafka")
    for i, v in enumerate(vals):
        if v:
            ax.text(v, i - (h / 2 if has_bk else 0), f" {v:.2f}", va="center", fontsize=6)
    for i, v in enumerate(bk_vals):
        if v:
            ax.text(v, i + h / 2, f" {v:.2f}", va="center", fontsize=6)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    shown = [v for v in vals + bk_vals if v]
    ax.set_xlim(min(0.5, min(shown) / 1.5), max(2.0, max(shown) * 1.6))
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ours / Apache Kafka (median of rounds; green = meets the goal direction, red = misses)")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower right", fontsize=7)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return path


def offset_search_chart(summary: dict, path: Path, title: str) -> Path | None:
    """Random-offset fetch time vs records in the topic (log x), one line per broker; None without data."""
    per = summary.get("scale-offset-search")
    if not per:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    drew = False
    for broker, metrics in per.items():
        pts = [(n, metrics[f"search_ms_{n}"]) for n in SEARCH_SIZES
               if metrics.get(f"search_ms_{n}") is not None and metrics[f"search_ms_{n}"] == metrics[f"search_ms_{n}"]]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=broker, color=COLOURS.get(broker))
            drew = True
    if not drew:
        plt.close(fig)
        return None
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("records in the topic (100 B each)")
    ax.set_ylabel("Fetch at a random offset, ms (median)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return path
