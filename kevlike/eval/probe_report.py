"""The run directory of ``kevlike probes``: each probe's figure beside its target from the design, a
verdict and its sample size (issue 34).

    RUN_DIR/probes.json   {"meta": {model, dtype, config, seed, git_commit, machine, seconds, …}, probe: result, …}
    RUN_DIR/report.md     one table row per probe (figure, target, verdict, n), the leak figures side by
                          side, the needle grid, the plots
    RUN_DIR/needle.png    needle accuracy per (length, depth), yes/no and choice   (matplotlib only)
    RUN_DIR/leak.png      max |Δp| under naive packing vs the branch mask          (matplotlib only)

Targets come from DESIGN.md (§5, §6, §12) and kev's published figures where the design quotes them;
where the design names no figure, the target says so and the criterion is ours (named as such) or
absent (verdict ``—``). Float tolerances follow the design's equality rule: 1e-5 in float32, 2e-2 in
bfloat16 (or int8).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

PLOT_NOTICE = "plots skipped: matplotlib is not installed (pip install 'kevlike[bench]' or matplotlib)"


def tolerance(dtype: str | None) -> float:
    """Largest |Δp| two runs that the mask makes equal may differ by: 1e-5 in float32, else 2e-2 (DESIGN §6)."""
    return 1e-5 if dtype in (None, "float32") else 2e-2


def _cell(text: str) -> str:
    """``text`` safe inside a markdown table cell (a literal ``|`` would end the cell)."""
    return text.replace("|", "\\|")


def _f(x) -> str:
    return "nan" if isinstance(x, float) and math.isnan(x) else f"{x:.3g}" if isinstance(x, float) else str(x)


class Target:
    """One probe's target: ``text`` (what the design asks, with its source), ``figure(result)`` (the
    headline figure, a string), ``size(result)`` (sample size, a string), ``verdict(result, tol)`` (True,
    False, or None when the sample is too small to judge; ``verdict`` itself None when no figure is set)."""

    def __init__(self, text: str, figure: Callable, size: Callable, verdict: Callable | None = None):
        self.text, self.figure, self.size, self.verdict = text, figure, size, verdict


def _leak_figure(r: dict) -> str:
    return (f"contamination max |Δp| naive {_f(r['naive']['contamination']['max_abs_dp'])} vs branch "
            f"{_f(r['branch']['contamination']['max_abs_dp'])}; order naive {_f(r['naive']['order']['max_abs_dp'])} "
            f"vs branch {_f(r['branch']['order']['max_abs_dp'])}")


def _leak_ok(r: dict, tol: float) -> bool:
    branch = max(r["branch"]["contamination"]["max_abs_dp"], r["branch"]["order"]["max_abs_dp"])
    naive = max(r["naive"]["contamination"]["max_abs_dp"], r["naive"]["order"]["max_abs_dp"])
    return branch <= tol < naive


def _row_mean(grid: list[list[float]], i: int) -> float:
    return sum(grid[i]) / len(grid[i])


NEEDLE_MIN_TRIALS = 4
"""States per cell below which the needle gets no verdict: a row of 5 depths × 4 states is 20 choice answers, so
one miss moves its mean by 0.05, half the criterion's 0.10."""


def _needle_ok(r: dict, tol: float) -> bool | None:
    if r["trials_per_cell"] < NEEDLE_MIN_TRIALS:
        return None
    return all(_row_mean(r[k], -1) >= _row_mean(r[k], 0) - 0.10 for k in ("noul_accuracy", "choice_accuracy"))


TARGETS: dict[str, Target] = {
    "packed_vs_separate": Target(
        "max |Δp| ≤ 1e-5 fp32 / 2e-2 bf16 (DESIGN §6, §12; kev 4e-6)",
        lambda r: f"max |Δp| {_f(r['max_abs_dp'])}, mean {_f(r['mean_abs_dp'])}",
        lambda r: f"{r['requests']} requests",
        lambda r, tol: r["max_abs_dp"] <= tol),
    "permutation": Target(
        "flip rate ≤ 2 % (DESIGN §5, list mode; kev 7.4 % before its KL term)",
        lambda r: f"flip rate {_f(r['flip_rate'])}, spread mean {_f(r['spread_mean'])}, p90 {_f(r['spread_p90'])}",
        lambda r: f"{r['n']} questions × {r['orderings']} orders",
        lambda r, tol: r["flip_rate"] <= 0.02),
    "option_addition": Target(
        "mean |shift| ≤ 0.13, p90 ≤ 0.34 nats (kev's figures, DESIGN §12)",
        lambda r: f"mean |shift| {_f(r['mean_abs_shift'])}, p90 {_f(r['p90_abs_shift'])}, mean {_f(r['mean_shift'])}",
        lambda r: f"{r['n']} questions",
        lambda r, tol: r["mean_abs_shift"] <= 0.13 and r["p90_abs_shift"] <= 0.34),
    "none_of_the_above": Target(
        "no figure in DESIGN §12 (reported only)",
        lambda r: (f"p(none) with true {_f(r['p_none_with_true'])}, accuracy {_f(r['accuracy_with_none'])}, "
                   f"none chosen without true {_f(r['none_rate_without_true'])}"),
        lambda r: f"{r['n']} questions"),
    "isolation": Target(
        "p(code 0): sibling = absent (max |Δ| ≤ 1e-5 fp32), state high (ours: ≥ 0.5; kev 0.03 / 0.03 / 0.99)",
        lambda r: (f"sibling {_f(r['sibling'])}, absent {_f(r['absent'])}, state {_f(r['state'])}; "
                   f"max |sibling − absent| {_f(r['max_abs_sibling_minus_absent'])}"),
        lambda r: f"{r['trials']} trials",
        lambda r, tol: r["max_abs_sibling_minus_absent"] <= tol and r["state"] >= 0.5),
    "forgery": Target(
        "every request: option count = keys, only structural reserved ids, answer keys = keys (DESIGN §12)",
        lambda r: (f"option count ok {r['option_count_ok']}, reserved ids ok {r['reserved_ids_structural']}, "
                   f"answer keys ok {r['answer_keys_ok']}"),
        lambda r: f"{r['requests']} requests",
        lambda r, tol: r["option_count_ok"] == r["reserved_ids_structural"] == r["answer_keys_ok"] == r["requests"]),
    "threshold_economics": Target(
        "no figure in DESIGN §12; ours: cost at κ_FP/(κ_FP+κ_FN) ≤ cost of always and of never acting",
        lambda r: (f"cost at {_f(r['threshold'])}: {_f(r['cost_at_threshold'])}; at 0.5 {_f(r['cost_at_0.5'])}, "
                   f"always {_f(r['cost_always'])}, never {_f(r['cost_never'])}, best {_f(r['cost_at_best'])}"),
        lambda r: f"{r['n']} messages",
        lambda r, tol: r["cost_at_threshold"] <= min(r["cost_always"], r["cost_never"])),
    "leak": Target(
        "branch mask: max |Δp| ≤ 1e-5 fp32 / 2e-2 bf16; naive packing above it (DESIGN §1, §6; issue 34)",
        _leak_figure,
        lambda r: f"{r['n']} requests ({_f(r['tokens_mean'])} tokens mean)",
        _leak_ok),
    "needle": Target(
        f"no figure in the design; ours: accuracy at the longest state ≥ at 256 tokens − 0.10 (yes/no and choice; "
        f"judged from {NEEDLE_MIN_TRIALS} states per cell)",
        lambda r: (f"yes/no {_f(r['noul_mean'])} (chance 0.5), choice {_f(r['choice_mean'])} (chance 0.25); "
                   f"{r['lengths'][0]} → {r['lengths'][-1]} tokens: yes/no {_f(_row_mean(r['noul_accuracy'], 0))} → "
                   f"{_f(_row_mean(r['noul_accuracy'], -1))}, choice {_f(_row_mean(r['choice_accuracy'], 0))} → "
                   f"{_f(_row_mean(r['choice_accuracy'], -1))}"),
        lambda r: f"{r['n']} states ({r['trials_per_cell']} per cell)",
        _needle_ok),
}


def verdict(name: str, result: dict, dtype: str | None) -> str:
    """``"pass"``, ``"fail"``, ``"—"`` (no target) or ``"— (sample too small)"`` for probe ``name``'s ``result``."""
    target = TARGETS[name]
    if target.verdict is None:
        return "—"
    ok = target.verdict(result, tolerance(dtype))
    return "— (sample too small)" if ok is None else "pass" if ok else "fail"


def leak_table(r: dict) -> str:
    """The leak figures side by side: one row per (measure, statistic), naive and branch columns."""
    lines = ["| measure | naive packing | branch mask |", "|---|---|---|"]
    for measure in ("contamination", "order"):
        for stat in ("max_abs_dp", "mean_abs_dp", "flip_rate"):
            lines.append(f"| {measure} {_cell(stat.replace('_abs_dp', ' |Δp|').replace('_', ' '))} | "
                         f"{_f(r['naive'][measure][stat])} | {_f(r['branch'][measure][stat])} |")
    return "\n".join(lines)


def needle_table(r: dict) -> str:
    """The needle grid: one row per length, one ``yes/no · choice`` cell per depth, and the mean P(true) of the
    two yes/no questions (equal values: the yes/no answer does not read the fact)."""
    diag = "p_true_yes" in r                                  # absent from runs before the field existed
    head = ("| state tokens (built) | " + " | ".join(f"depth {int(round(d * 100))} %" for d in r["depths"])
            + (" | mean P(true): true city · distractor |" if diag else " |"))
    lines = [head, "|---" * (len(r["depths"]) + 1 + diag) + "|"]
    for i, length in enumerate(r["lengths"]):
        cells = " | ".join(f"{r['noul_accuracy'][i][j]:.2f} · {r['choice_accuracy'][i][j]:.2f}"
                           for j in range(len(r["depths"])))
        extra = f" {r['p_true_yes'][i]:.2f} · {r['p_true_no'][i]:.2f} |" if diag else ""
        lines.append(f"| {length} ({r['tokens_mean'][i]:.0f}) | {cells} |{extra}")
    return "\n".join(lines)


def plots(results: dict, run_dir: Path) -> list[str] | None:
    """Write ``needle.png`` and ``leak.png`` for the probes that ran; the file names, or None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    written = []
    if "needle" in results:
        r = results["needle"]
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.2 + 0.3 * len(r["lengths"])))
        for ax, key, title in zip(axes, ("noul_accuracy", "choice_accuracy"), ("yes/no (chance 0.5)",
                                                                               "choice (chance 0.25)")):
            im = ax.imshow(r[key], vmin=0, vmax=1, cmap="viridis", aspect="auto")
            ax.set_xticks(range(len(r["depths"])), [f"{int(round(d * 100))}" for d in r["depths"]])
            ax.set_yticks(range(len(r["lengths"])), [str(x) for x in r["lengths"]])
            ax.set_xlabel("fact depth (%)")
            ax.set_ylabel("state tokens")
            ax.set_title(f"{title}, {r['trials_per_cell']} per cell")
            for i in range(len(r["lengths"])):
                for j in range(len(r["depths"])):
                    ax.text(j, i, f"{r[key][i][j]:.2f}", ha="center", va="center", fontsize=8,
                            color="white" if r[key][i][j] < 0.5 else "black")
        fig.colorbar(im, ax=axes, fraction=0.03)
        fig.savefig(run_dir / "needle.png", dpi=100)
        plt.close(fig)
        written.append("needle.png")
    if "leak" in results:
        r = results["leak"]
        fig, ax = plt.subplots(figsize=(5, 3.2))
        xs = range(2)
        for k, (m, label) in enumerate((("naive", "naive packing"), ("branch", "branch mask"))):
            ys = [max(r[m][x]["max_abs_dp"], 1e-9) for x in ("contamination", "order")]
            ax.bar([x + 0.38 * k for x in xs], ys, width=0.38, label=label)
        ax.set_yscale("log")
        ax.set_xticks([x + 0.19 for x in xs], ["contamination", "order"])
        ax.set_ylabel("max |Δp|")
        ax.set_title(f"leak, {r['n']} requests")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(run_dir / "leak.png", dpi=100)
        plt.close(fig)
        written.append("leak.png")
    return written


def write_probe_run(run_dir: Path, meta: dict, results: dict) -> tuple[Path, str]:
    """Write ``probes.json``, the plots and ``report.md`` into ``run_dir`` (created if missing).

    Args:
        run_dir: the run directory.
        meta: ``{"model", "dtype", "seed", "git_commit", "machine", "config", …}`` (written as is).
        results: ``{probe name: result}`` from :func:`kevlike.eval.probes.run_probes` (``seconds`` included).

    Returns:
        ``(run_dir, report markdown)``.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "probes.json").write_text(json.dumps({"meta": meta, **results}, indent=2))
    written = plots(results, run_dir)
    seconds = results.get("seconds", {})
    lines = [f"# kevlike probes: model `{meta.get('model')}`", "",
             f"dtype {meta.get('dtype')}, option orders {meta.get('option_orders')}, option mode "
             f"{meta.get('option_mode')}, seed {meta.get('seed')}, commit {meta.get('git_commit')}; "
             f"{(meta.get('machine') or {}).get('cpu')} ({(meta.get('machine') or {}).get('cores')} cores); "
             f"command `{meta.get('command')}`.", "",
             "| probe | figure | target | verdict | n | seconds |", "|---|---|---|---|---|---|"]
    for name, target in TARGETS.items():
        if name in results:
            r = results[name]
            lines.append(f"| {name} | {_cell(target.figure(r))} | {_cell(target.text)} | "
                         f"{verdict(name, r, meta.get('dtype'))} | {target.size(r)} | {seconds.get(name, '')} |")
    if "leak" in results:
        lines += ["", "## Leak: naive packing vs the branch mask", "",
                  "Question 1's text edited (contamination, over the other questions) and the first and last "
                  "questions swapped (order, over all questions); |Δp| over every probability, flip rate = share of "
                  "questions whose most likely answer changes.", "", leak_table(results["leak"])]
    if "needle" in results:
        lines += ["", "## Needle: accuracy per state length and fact depth", "",
                  "Each cell: yes/no accuracy · choice accuracy.", "", needle_table(results["needle"])]
    lines.append("")
    if written is None:
        lines.append(PLOT_NOTICE)
    else:
        lines += [f"![{p}]({p})" for p in written]
    md = "\n".join(lines) + "\n"
    (run_dir / "report.md").write_text(md)
    return run_dir, md
