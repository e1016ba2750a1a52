"""Abstention figures of an eval run (docs/guide/abstention.md): the markdown table of
:func:`kevlike.metrics.abstention` per group and the risk–coverage plot ``risk_coverage.png``.

Every ``kevlike eval`` run (suites, generalization suites, ``--data FILE.jsonl``) of a model with the
``x_abstain`` capability writes them; a model without it writes neither.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kevlike.metrics import risk_coverage


def _cell(v, fmt: str = ".3f") -> str:
    return "–" if v is None else format(v, fmt)


def abstention_table(summary: dict, group: str = "per_source") -> str:
    """Markdown: one row for ``overall`` and one per entry of ``summary[group]`` that has abstention figures —
    n, "cannot tell" questions, accuracy answering all, coverage at ≤ 5 % error and AURC (answering when
    ``x_abstain`` is low, then when P(right) is high), AUROC and ECE of ``x_abstain``. Empty when no entry has
    them."""
    rows = [("overall", summary.get("overall", {}))] + sorted((summary.get(group) or {}).items())
    rows = [(k, s["abstention"]) for k, s in rows if (s.get("abstention") or {}).get("n")]
    if not rows:
        return ""
    head = ("| {} | n | cannot tell | accuracy, all answered | coverage at ≤ 5 % error | AURC | "
            "coverage at ≤ 5 % error, by P(right) | AURC, by P(right) | AUROC x_abstain | ECE x_abstain |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n").format(group.removeprefix("per_").removesuffix("s"))
    return head + "\n".join(
        f"| {k} | {a['n']} | {a['n_cannot_tell']} | {a['accuracy_all']:.3f} | {a['coverage_at_5pct']:.3f} | "
        f"{a['aurc']:.3f} | {_cell(a.get('coverage_at_5pct_p_right'))} | {_cell(a.get('aurc_p_right'))} | "
        f"{_cell(a['auroc'])} | {_cell(a['ece'])} |" for k, a in rows)


def risk_coverage_plot(records: list[dict], out: Path, group: str = "source") -> list[str]:
    """``risk_coverage.png`` in ``out``: accuracy on the answered questions against the share answered (answer
    when ``x_abstain`` < t), all records and one line per ``group`` value (up to 8, the largest), and all records
    answered when P(right) > t (dotted; :func:`kevlike.metrics.p_right`). Returns the
    file names written: none when no record has ``x_abstain``, or (with a one-line notice on stderr) when
    matplotlib is not installed."""
    rs = [r for r in records if r.get("x_abstain") is not None]
    if not rs:
        return []
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("kevlike: matplotlib is not installed; risk_coverage.png not drawn (pip install matplotlib)",
              file=sys.stderr)
        return []
    groups: dict = {}
    for r in rs:
        groups.setdefault(r.get(group, "?"), []).append(r)
    fig, ax = plt.subplots(figsize=(5.5, 4))

    def draw(curve, **style):   # accuracy against coverage, a step at each threshold, from coverage 0
        ax.plot([0.0] + [p["coverage"] for p in curve], [curve[0]["accuracy"]] + [p["accuracy"] for p in curve],
                drawstyle="steps-pre", **style)
    for name, part in [("all", rs)] + sorted(groups.items(), key=lambda kv: -len(kv[1]))[:8]:
        draw(risk_coverage(part), lw=2 if name == "all" else 1, label=f"{name} (n = {len(part)})")
    draw(risk_coverage(rs, by="p_right"), lw=2, ls=":", color="black",
         label=f"all, answer when P(right) > t (n = {len(rs)})")
    ax.axhline(0.95, ls="--", color="grey", lw=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("share answered (coverage)")
    ax.set_ylabel("accuracy on the answered questions")
    ax.set_title("risk–coverage: answer when x_abstain < t (dotted: P(right) > t)")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(out / "risk_coverage.png", dpi=100)
    plt.close(fig)
    return ["risk_coverage.png"]
