"""Held-out evaluation on official test splits (DESIGN.md §8, §12): ``kevlike eval --model DIR --suite NAME``.

Each dataset contributes a fixed, seeded sample of its *test* split (:func:`kevlike.data.sources.eval_examples`:
intents are asked over their full label set, in sorted order, with the first prompt). The run
directory ``runs/eval-SUITE-YYYYmmdd-HHMMSS/`` holds ``metrics.json`` (overall, per dataset, per type,
ECE bin counts), ``records.jsonl`` (one line per question: logits, probabilities, gold), ``report.md``
and a reliability diagram per question type (``reliability_TYPE.png``, if matplotlib is installed).
"""

from __future__ import annotations

import json
import platform
import sys
import time
from datetime import datetime
from pathlib import Path

import torch

from kevlike.config.engine import DEFAULT_OPTIONS, EngineOptions
from kevlike.data.tasks import eval_examples
from kevlike.eval.baselines import baseline_section, compare
from kevlike.eval.generalization import (
    CONTRAST_SPLITS, HALVES, UNCALIBRATED_ABSTENTION_HEADING, absent_splits, check_splits, contrast_pairs, counted,
    generalization_sets, generalization_summary, half_for, report_tables, with_halves
)
from kevlike.eval.abstention import abstention_table, risk_coverage_plot
from kevlike.eval.probes import STRUCTURAL, run_probes
from kevlike.eval.remote import RemoteEngine
from kevlike.eval.resume import (CALL_FILE, check_resumable, check_same_call, read_split, run_call, split_file,
                                 write_split)
from kevlike.metrics import N_BINS, ece, read_records, records_from_logits, summarize, summary, write_records
from kevlike.model.backbones import resolve_model
from kevlike.model.engine import Engine
from kevlike.model.modeldir import ModelDir, load_temperatures
from kevlike.model.temperatures import TemperatureTable, fit_table
from kevlike.runs import git_commit, machine, write_text_atomic

# dataset -> examples sampled from its test split (seed 0)
SUITES = {
    "heldout": {"banking77": 500, "clinc150": 250, "spam": 500, "sentiment": 500},
    # ≥ 1,000 questions per type (DESIGN §12): choice 500 + 500; noul = all 988 spam test messages +
    # one "is this about X?" twin per intent request (1,000); score 1,000
    "calibration": {"banking77": 500, "clinc150": 500, "spam": None, "sentiment": 1000},
    "full": {"banking77": None, "clinc150": None, "hwu64": None, "spam": None, "sentiment": None},
    "quick": {"banking77": 16, "spam": 16, "sentiment": 16},
}
NOUL_TWINS = {"calibration": 1}  # noul twins per intent request, by suite
GENERALIZATION_SUITES = ("generalization", "generalization-quick")   # kevlike/eval/generalization.py

COLUMNS = ("n", "accuracy", "nll", "brier", "ece", "confident_error", "coverage_at_5pct", "mae")


def table(summary: dict) -> str:
    """Markdown table: one row per dataset, then per type, then overall."""
    lines = ["| set | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]

    def row(name: str, s: dict) -> str:
        cells = []
        for c in COLUMNS:
            v = s.get(c)
            cells.append("" if v is None else (str(v) if c == "n" else f"{v:.3f}"))
        return f"| {name} | " + " | ".join(cells) + " |"

    for k, s in summary["per_source"].items():
        lines.append(row(k, s))
    for k, s in summary["per_type"].items():
        lines.append(row(f"type: {k}", s))
    lines.append(row("**overall**", summary["overall"]))
    return "\n".join(lines)


def reliability_plots(records: list[dict], out: Path) -> list[str]:
    """One reliability diagram per question type (accuracy vs mean confidence per bin, bin counts)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []

    written = []
    records = [r for r in records if not r.get("cannot_tell")]     # "cannot tell" questions have no right option
    for qtype in sorted({r["type"] for r in records}):
        recs = [r for r in records if r["type"] == qtype]
        e, bins = ece(recs)
        fig, ax = plt.subplots(figsize=(4.2, 4))
        ax.plot([0, 1], [0, 1], "--", color="grey", lw=1)
        xs = [(b["lo"] + b["hi"]) / 2 for b in bins if b["count"]]
        ax.bar(xs, [b["accuracy"] for b in bins if b["count"]], width=1 / N_BINS, alpha=0.6, edgecolor="k",
               label="accuracy")
        ax.plot([b["confidence"] for b in bins if b["count"]], [b["accuracy"] for b in bins if b["count"]], "o",
                color="C3", label="(confidence, accuracy)")
        for b, x in zip([b for b in bins if b["count"]], xs):
            ax.annotate(str(b["count"]), (x, 0.02), ha="center", fontsize=7)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("top-label confidence")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{qtype}: ECE {e:.3f} (n = {len(recs)})")
        ax.legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        name = f"reliability_{qtype}.png"
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        written.append(name)
    return written


def comparison_protocol(records: list[dict]) -> dict:
    """DESIGN §12's temperature comparison protocol (for figures comparable with kev's, not for the
    shipped temperatures): fit per (type, K-bucket) on the even-indexed test records' logits, report
    on the odd-indexed ones at T = 1 and with the fitted temperatures. Returns ``{type: {"n", "ece_t1",
    "ece_fitted", "nll_t1", "nll_fitted"}}`` plus ``"overall"``."""

    even, odd = records[0::2], records[1::2]
    table, _ = fit_table(even, source="even-indexed test records")
    before = rescore(odd, TemperatureTable())
    after = rescore(odd, table)
    out = {}
    for qtype in sorted({r["type"] for r in odd}) + ["overall"]:
        b = [r for r in before if qtype in ("overall", r["type"])]
        a = [r for r in after if qtype in ("overall", r["type"])]
        sb, sa = summary(b), summary(a)
        out[qtype] = {"n": sb["n"], "ece_t1": sb["ece"], "ece_fitted": sa["ece"], "nll_t1": sb["nll"],
                      "nll_fitted": sa["nll"]}
    return out


def rescore(records: list[dict], table, option_mode: str = "list") -> list[dict]:
    """The same records with probabilities ``softmax(z / T(type, K))`` from another temperature table (score
    questions through its readout, :meth:`~kevlike.model.temperatures.TemperatureTable.probabilities`), and
    (records with ``abstain_logit``) ``x_abstain = sigmoid(a / T_abstain + bias)`` (logits do not depend on
    temperatures, so no forward pass is needed). ``option_mode``: the mode the records' choice questions were
    read in (a set-mode run's take the ``choice:set`` temperatures, as the engine serves them)."""

    out = []
    for r in records:
        z = torch.tensor(r["logits"], dtype=torch.float32)
        new = {**r, "probs": table.probabilities(r["type"], z, option_mode).tolist()}
        if r.get("abstain_logit") is not None:
            new["x_abstain"] = table.abstain_probability(r["abstain_logit"])
        out.append(new)
    return out


def run_suite(model: str | None, suite: str = "heldout", out: str | Path = "runs", *,
              options: EngineOptions = DEFAULT_OPTIONS, n: int | None = None, batch_size: int = 4, quiet: bool = False,
              engine=None, reuse: str | Path | None = None, url: str | None = None, probes: int = 0,
              bigbench: str | Path | None = None, half: str | None = None, splits=None, lm_baseline: bool = True,
              lm_engine=None, resume: str | Path | None = None) -> Path:
    """Evaluate ``model`` (or an already loaded ``engine``, or the Jev-compatible server at ``url``)
    on a suite; returns the run directory.
    ``reuse``: an earlier eval run directory whose logits are re-scored with ``model``'s current
    temperatures (e.g. before vs after ``kevlike calibrate``), without a forward pass.
    ``probes``: also run :func:`kevlike.eval.probes.run_probes` with this ``n`` (0: no probes; the structural
    probes, not leak and needle: ``kevlike probes`` runs those).
    ``options``: how a local model is loaded and reads (:meth:`kevlike.model.engine.Engine.from_pretrained`; its
    ``dtype``, ``quantize`` and ``threads`` also load the LM-readout baseline).
    ``bigbench``: BIG-bench's source archive for the generalization suites (default: ``$KEVLIKE_HOME``).
    ``half``: generalization suites only — answer only the items of this half (``validation`` or ``test``).
    ``splits``: generalization suites only — answer only these splits (names of
    :data:`kevlike.eval.generalization.SPLITS`; default all).
    ``resume``: generalization suites only — an unfinished run directory of the same call (same model weights and
    calibration, suite, half, splits, ``n``, batch size, precision, option mode and orders, baseline), whose
    finished splits (``splits/*.json``, written as each split ends) are read instead of answered again; the run
    is finished in that directory.
    ``model`` may be a bare backbone (its training-free LM readout is then the model evaluated).
    Every report carries the baselines of :mod:`kevlike.eval.baselines` on the same items (chance, majority and,
    with ``lm_baseline``, the backbone's LM readout: a second pass of the bare backbone, ``lm_engine`` or loaded
    from the model's manifest; not with ``url``).

    Raises:
        ValueError: unknown suite, or an option mode the model was not trained for.
        kevlike.eval.resume.ResumeError: ``resume`` is not an unfinished run of this same call, or a finished split's items differ
            from the suite's now.
        kevlike.eval.remote.RemoteError: ``url`` unreachable or answering errors.
        kevlike.model.backbones.ModelNotFoundError: unknown model.
        kevlike.data.sources.DataUnavailableError: a data package is missing.
    """

    if suite not in SUITES and suite not in GENERALIZATION_SUITES:
        raise ValueError(f"unknown suite {suite!r} (known: {', '.join([*SUITES, *GENERALIZATION_SUITES])})")
    if half is not None and (suite not in GENERALIZATION_SUITES or half not in HALVES):
        raise ValueError(f"half {half!r}: one of {HALVES}, with a generalization suite (not {suite!r})")
    if splits is not None and suite not in GENERALIZATION_SUITES:
        raise ValueError(f"splits go with a generalization suite (not {suite!r})")
    splits = check_splits(splits, half)
    if reuse is not None and (splits is not None or half is not None):
        raise ValueError("--reuse re-scores every record of the earlier run: splits and half go with a new run")
    if reuse is not None and resume is not None:
        raise ValueError("reuse re-scores a finished run, resume finishes an unfinished one: not both")
    if resume is not None and suite not in GENERALIZATION_SUITES:
        raise ValueError(f"resume goes with a generalization suite (not {suite!r})")
    if resume is not None:
        check_resumable(Path(resume))
    if reuse is not None:
        return _rescore_run(model, Path(reuse), Path(out), quiet)
    if engine is None and url is not None:
        engine = RemoteEngine(url, model)
    if engine is None:
        engine = Engine.from_pretrained(model, options)
    lm = _LMBaseline(engine, url, lm_baseline, lm_engine, options)
    if suite in GENERALIZATION_SUITES:
        return _run_generalization(engine, suite, Path(out), n, batch_size, quiet, url, bigbench, half, lm, splits,
                                   options, None if resume is None else Path(resume))
    sizes = {k: (n if n is not None else v) for k, v in SUITES[suite].items()}
    run_dir = Path(out) / f"eval-{suite}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=False)
    records, timing, lm_records = [], {}, []
    for name, size in sizes.items():
        examples = eval_examples(name, "test", size, seed=0, noul_twins=NOUL_TWINS.get(suite, 0))
        t0 = time.perf_counter()
        if not quiet:
            print(f"{name}: {len(examples)} test requests", file=sys.stderr)
        recs = records_from_logits(engine, examples, batch_size, progress=not quiet)
        records.extend(recs)
        timing[name] = round(time.perf_counter() - t0, 1)
        lm_records.extend(lm.records(examples, recs, batch_size, quiet, timing, name))
    summary = summarize(records)
    summary["baselines"] = compare(records, lm_records if lm.ran else None,
                                   lambda r: [r["source"], f"type: {r['type']}", "overall"])
    if url is None:  # served probabilities are already calibrated by the server; log p is not a logit

        summary["uncalibrated"] = summarize(rescore(records, TemperatureTable()))  # the same logits at T = 1
        summary["comparison_protocol"] = comparison_protocol(records)
    if probes:
        t0 = time.perf_counter()
        summary["probes"] = run_probes(engine, probes, progress=not quiet, only=list(STRUCTURAL))
        timing["probes"] = round(time.perf_counter() - t0, 1)

    meta = {"model": engine.name, "suite": suite, "sizes": sizes, "noul_twins": NOUL_TWINS.get(suite, 0),
            "seed": 0, "git_commit": git_commit(), "machine": platform.platform(), "cpu": machine()["cpu"],
            "device": str(engine.device), "url": url, "seconds": timing, "temperatures": engine.temperatures.source,
            "option_orders": getattr(engine, "option_orders", None),
            "option_mode": getattr(engine, "option_mode", None), "dtype": getattr(engine, "dtype", None),
            "dtype_reason": getattr(engine, "dtype_reason", None), "readout": _readout_name(engine),
            "lm_baseline": lm.note}
    sample_sizes = ", ".join(f"{k}: {v if v is not None else 'all'}" for k, v in sizes.items())
    intro = (f"Test splits, seeded samples ({sample_sizes}); "
             f"probabilities with the model's temperatures ({engine.temperatures.source}); option orders per choice "
             f"question: {meta['option_orders']}; option mode: {meta['option_mode']}; readout: {meta['readout']}. "
             f"Commit {meta['git_commit']}; "
             f"{meta['machine']}; seconds per dataset {timing}.")
    return _write_run(run_dir, meta, summary, records, f"# kevlike eval: suite `{suite}`, model `{engine.name}`", intro, quiet)


def probe_table(probes: dict) -> str:
    """Markdown lines, one per probe result."""
    lines = ["| probe | result |", "|---|---|"]
    for name, res in probes.items():
        if name == "seconds":
            continue
        cells = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items())
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def _write_run(run_dir: Path, meta: dict, summary: dict, records: list[dict], title: str, intro: str,
               quiet: bool) -> Path:
    """Write records.jsonl, the reliability plots, report.md and, last, metrics.json; print the table."""
    write_records(run_dir / "records.jsonl", records)
    plots = reliability_plots(records, run_dir) + risk_coverage_plot(records, run_dir)
    md = table(summary)
    if abst := abstention_table(summary):
        md += "\n\nAbstention (x_abstain; answer when x_abstain < t, docs/guide/abstention.md):\n\n" + abst
    if summary.get("uncalibrated"):
        md += "\n\nThe same logits at T = 1 (uncalibrated):\n\n" + table(summary["uncalibrated"])
    if summary.get("comparison_protocol"):
        md += ("\n\nTemperature comparison protocol (DESIGN §12; fit on even-indexed records, report on odd):\n\n"
               "| type | n | ECE T = 1 | ECE fitted | NLL T = 1 | NLL fitted |\n|---|---|---|---|---|---|\n")
        md += "\n".join(f"| {k} | {v['n']} | {v['ece_t1']:.3f} | {v['ece_fitted']:.3f} | {v['nll_t1']:.3f} | "
                         f"{v['nll_fitted']:.3f} |" for k, v in summary["comparison_protocol"].items())
    if summary.get("baselines"):
        md += "\n\n" + baseline_section(summary["baselines"], meta.get("lm_baseline"))
    if summary.get("probes"):
        md += "\n\nProbes (DESIGN §12, kevlike/eval/probes.py):\n\n" + probe_table(summary["probes"])
    write_text_atomic(run_dir / "report.md",
                      f"{title}\n\n{intro}\n\n{md}\n\n" + "".join(f"![{p}]({p})\n" for p in plots))
    # last: a run with metrics.json is finished (`--resume` refuses it), so its plots and report come first
    write_text_atomic(run_dir / "metrics.json", json.dumps({"meta": meta, **summary}, indent=2))
    print(md)                                   # the result: printed with --quiet too (it hides progress only)
    print(f"run directory: {run_dir}")
    return run_dir


def _rescore_run(model: str | None, reuse: Path, out: Path, quiet: bool) -> Path:

    resolved = resolve_model(model, auto_fetch=False)
    if resolved.artifact_dir is None:
        raise ValueError(f"model {model!r} is not a decision model (no temperatures to apply)")
    temps = load_temperatures(resolved.artifact_dir)
    try:
        old = json.loads((reuse / "metrics.json").read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"--reuse {reuse}: {reuse / 'metrics.json'} is not JSON ({e.msg} at line {e.lineno}); a "
                         f"cut-off file?") from None
    if not isinstance(old, dict) or not isinstance(old.get("meta"), dict) or "suite" not in old["meta"]:
        raise ValueError(f"--reuse {reuse}: not a suite run (its metrics.json names no suite; an `eval --data` run "
                         f"is re-scored by running it again)")
    raw = read_records(reuse / "records.jsonl")
    if not raw:
        raise ValueError(f"--reuse {reuse}: {reuse / 'records.jsonl'} holds no records")
    records = rescore(raw, temps, old["meta"].get("option_mode") or "list")
    run_dir = out / f"eval-{old['meta']['suite']}-rescored-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=False)
    summary = summarize(records)
    if "baselines" in old:   # chance and majority do not depend on temperatures; the LM readout's row is kept
        sets = ((lambda r: [r["split"]] if counted(r) else []) if old["meta"]["suite"] in GENERALIZATION_SUITES
                else (lambda r: [r["source"], f"type: {r['type']}", "overall"]))
        summary["baselines"] = compare(records, None, sets)
        for name, row in summary["baselines"].items():
            row["lm_readout"] = (old["baselines"].get(name) or {}).get("lm_readout")
    if old["meta"]["suite"] in GENERALIZATION_SUITES:
        summary["generalization"] = generalization_summary(records, contrast_pairs())
        meta = {**old["meta"], "model": str(model) if model else old["meta"]["model"], "rescored_from": str(reuse),
                "temperatures": temps.source}
        write_records(run_dir / "records.jsonl", records)
        write_text_atomic(run_dir / "metrics.json", json.dumps({"meta": meta, **summary}, indent=2))
        md = report_tables(summary["generalization"])
        write_text_atomic(run_dir / "report.md",
                          f"# kevlike eval (re-scored): suite `{meta['suite']}`, model `{meta['model']}`"
                          f"\n\nLogits of {reuse} with temperatures {temps.source}.\n\n{md}\n")
        print(md.split("\n\n| split:source")[0])   # the result, with --quiet too
        print(f"run directory: {run_dir}")
        return run_dir
    meta = {**old["meta"], "model": str(model) if model else old["meta"]["model"], "rescored_from": str(reuse),
            "temperatures": temps.source}
    return _write_run(run_dir, meta, summary, records,
                      f"# kevlike eval (re-scored): suite `{meta['suite']}`, model `{meta['model']}`",
                      f"Logits of {reuse} with temperatures {temps.source}.", quiet)


def _run_generalization(engine, suite: str, out: Path, n: int | None, batch_size: int, quiet: bool,
                        url: str | None, bigbench, half: str | None = None, lm: "_LMBaseline | None" = None,
                        splits: tuple[str, ...] | None = None, options: EngineOptions = DEFAULT_OPTIONS,
                        resume: Path | None = None) -> Path:

    lm = lm or _LMBaseline(engine, url, False)
    call = run_call(engine, suite=suite, half=half, splits=splits, n=n, batch_size=batch_size, url=url,
                    quantize=options.quantize, lm_baseline=lm.ran)
    if resume is not None:
        run_dir = resume
        check_same_call(run_dir, call)
    else:
        run_dir = out / f"eval-{suite}{'-' + half if half else ''}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        run_dir.mkdir(parents=True, exist_ok=False)
        write_text_atomic(run_dir / CALL_FILE, json.dumps(call, indent=2))
        if not quiet:       # named now, so a stopped run can be found and resumed
            print(f"run directory: {run_dir} (if stopped: the same command with --resume {run_dir})",
                  file=sys.stderr)
    sets = generalization_sets(quick=suite.endswith("quick"), n=n, bigbench=bigbench, splits=splits)
    absent = absent_splits(sets, splits)
    for split, why in absent.items():       # with --quiet too: the run is not comparable with one that has them
        print(f"kevlike eval: split {split} left out: {why}", file=sys.stderr)
    if half is not None:
        sets = {split: [e for e in exs if half_for(split, e) == half] for split, exs in sets.items()}
    records, timing, lm_records = [], {}, []
    for split, examples in sets.items():
        done = read_split(run_dir, split, examples)
        if done is not None:
            if not quiet:
                print(f"{split}: {len(examples)} requests, read from {split_file(run_dir, split)}", file=sys.stderr)
            records += done["records"]
            lm_records += done["lm_records"]
            timing.update(done["seconds"])
            lm.note = lm.note or done["lm_note"]
            continue
        t0 = time.perf_counter()
        if not quiet:
            print(f"{split}: {len(examples)} requests", file=sys.stderr)
        recs = [{**r, "split": split} for r in records_from_logits(engine, examples, batch_size, progress=not quiet)]
        split_records = with_halves(split, examples, recs)
        seconds = {split: round(time.perf_counter() - t0, 1)}
        split_lm = [{**r, "split": split} for r in lm.records(examples, recs, batch_size, quiet, seconds, split)]
        write_split(run_dir, split, examples, split_records, split_lm, seconds, lm.note)
        records += split_records
        lm_records += split_lm
        timing.update(seconds)
    pairs = contrast_pairs()
    gen = generalization_summary(records, pairs)
    summary = {**summarize(records), "generalization": gen,
               "baselines": compare(records, lm_records if lm.ran else None,
                                    lambda r: [r["split"]] if counted(r) else [])}
    if url is None:
        summary["generalization_uncalibrated"] = generalization_summary(rescore(records, TemperatureTable()), pairs,
                                                                        halves=False)
    meta = {"model": engine.name, "suite": suite, "half": half, "splits": splits, "sizes": {k: len(v) for k, v in sets.items()}, "seed": 0,
            "git_commit": git_commit(), "machine": platform.platform(), "cpu": machine()["cpu"],
            "device": str(engine.device), "url": url, "seconds": timing,
            "temperatures": engine.temperatures.source, "option_orders": getattr(engine, "option_orders", None),
            "option_mode": getattr(engine, "option_mode", None), "dtype": getattr(engine, "dtype", None),
            "dtype_reason": getattr(engine, "dtype_reason", None), "readout": _readout_name(engine),
            "lm_baseline": lm.note, "absent_splits": absent}
    write_records(run_dir / "records.jsonl", records)
    plots = (reliability_plots([r for r in records if r["split"] not in CONTRAST_SPLITS], run_dir)
             + risk_coverage_plot(records, run_dir, group="split"))
    md = report_tables(gen)
    md += "\n\n## Baselines (both halves)\n\n" + baseline_section(summary["baselines"], lm.note)
    if summary.get("generalization_uncalibrated"):
        md += ("\n\nThe same logits at T = 1 (uncalibrated; both halves):\n\n"
               + report_tables(summary["generalization_uncalibrated"], UNCALIBRATED_ABSTENTION_HEADING
                               ).split("\n\n| split:source")[0])
    intro = (f"Requests per split {meta['sizes']}; "
             + "".join(f"split {k} left out ({v}); " for k, v in absent.items())
             + f"readout: {meta['readout']}; temperatures {meta['temperatures']}; "
             f"commit {meta['git_commit']}; "
             f"{meta['cpu']}; seconds per split {timing}.")
    write_text_atomic(run_dir / "report.md", f"# kevlike eval: suite `{suite}`, model `{engine.name}`\n\n{intro}\n\n{md}\n\n"
                      + "".join(f"![{p}]({p})\n" for p in plots))
    # last: a run with metrics.json is finished (`--resume` refuses it), so its plots and report come first
    write_text_atomic(run_dir / "metrics.json", json.dumps({"meta": meta, **summary}, indent=2))
    print(md.split("\n\n| split:source")[0])       # the result, with --quiet too
    print(f"run directory: {run_dir}")
    return run_dir


def _readout_name(engine) -> str:
    name = getattr(getattr(engine, "readout", None), "name", None)
    if name == "lm" and getattr(engine, "artifact_dir", None) is not None:
        return "LM readout, LoRA-trained (no head)"
    return {"pointer": "pointer head", "lm": "LM readout (training-free)",
            "ensemble": "a linear pool of its members' answers"}.get(name, "as served (--url)")


class _LMBaseline:
    """The LM-readout baseline of a run (:mod:`kevlike.eval.baselines`): the bare backbone of the evaluated model,
    run on each split's examples after the model; ``note`` says which backbone, or why there is none."""

    def __init__(self, engine, url: str | None, wanted: bool, lm_engine=None, options: EngineOptions = DEFAULT_OPTIONS):
        self.loaded, self.ran = lm_engine, False
        # a bare backbone is its own baseline; a model trained through the LM readout (readout: lm) is not
        self.same = (getattr(getattr(engine, "readout", None), "name", None) == "lm"
                     and getattr(engine, "artifact_dir", None) is None)
        self.options = EngineOptions(dtype=options.dtype, quantize=options.quantize, threads=options.threads)
        self.artifact = getattr(engine, "artifact_dir", None)
        self.note = None
        if self.same:
            self.note, self.ran = "the evaluated model is itself the LM readout (the same records)", True
        elif url is not None:
            self.note = "not run: --url evaluates a served model (no local backbone)"
        elif not wanted:
            self.note = "not run (--no-lm-baseline)"
        elif lm_engine is None and getattr(engine, "members", None):
            self.note = "not run: an ensemble has no single backbone (run it per member)"
        elif lm_engine is None and self.artifact is None:
            self.note = "not run: the model was not loaded from a decision-model directory (its backbone is unknown)"
        else:
            self.ran = True

    def records(self, examples: list, model_records: list[dict], batch_size: int, quiet: bool, timing: dict,
                name: str) -> list[dict]:
        """The LM readout's records of ``examples`` ([] when it does not run); its seconds go to
        ``timing["lm_readout:NAME"]``."""
        if not self.ran:
            return []
        if self.same:
            return model_records
        if self.loaded is None:
            backbone = ModelDir(self.artifact).manifest()["backbone"]
            self.loaded = Engine.from_pretrained(str(resolve_model(backbone).backbone_dir), self.options)
            self.loaded.name = backbone
        if self.note is None:
            self.note = f"backbone {self.loaded.name} ({getattr(self.loaded, 'dtype', '?')}), no adapter, no head"
        t0 = time.perf_counter()
        if not quiet:
            print(f"{name}: LM-readout baseline", file=sys.stderr)
        out = records_from_logits(self.loaded, examples, batch_size, progress=not quiet)
        timing[f"lm_readout:{name}"] = round(time.perf_counter() - t0, 1)
        return out
