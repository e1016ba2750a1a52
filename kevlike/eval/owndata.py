"""A user's own labelled requests (:mod:`kevlike.data.labelled`): evaluate a model on them
(``kevlike eval --data FILE.jsonl``) and fit a calibration profile on them (``kevlike calibrate MODEL
--data FILE.jsonl --profile NAME``).

``eval --data`` writes a run directory: ``metrics.json`` (per type and per question id: accuracy, NLL,
Brier, ECE with bin counts and a bootstrap interval, confident errors, coverage at a 5 % error budget),
``records.jsonl`` (one answered question per line, with its logits), ``reliability_TYPE.png``,
``thresholds.json`` and ``report.md``; for a model with the ``x_abstain`` capability also the abstention figures
(risk–coverage curve, its area, coverage at ≤ 5 % error, AUROC and ECE of ``x_abstain`` against the file's
``{"cannot_tell": true}`` golds) and ``risk_coverage.png``.

**Threshold economics** (every noul question id): acting on "true" when it is false costs κ_FP,
not acting when it is true costs κ_FN (correct decisions cost 0). The expected cost of a decision at
probability p is minimised by acting iff ``p > κ_FP / (κ_FP + κ_FN)`` — the Bayes threshold for
calibrated probabilities (Elkan 2001, "The Foundations of Cost-Sensitive Learning"). The table reports,
per question, the mean cost per decision at that threshold, at 0.5, for "always act" and "never act",
the threshold that would have been cheapest on this data (an in-sample optimum: read it with the
question's n), and what acting at the Bayes threshold saves against the cheaper of always/never.

A costs file (``--costs``, YAML or JSON)::

    default: {false_positive: 1, false_negative: 1}      # optional; this is the default
    questions:
      urgent: {false_positive: 1, false_negative: 20}
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from kevlike.config.engine import DEFAULT_OPTIONS, EngineOptions
from kevlike.config.yamlfile import read_yaml
from kevlike.data.labelled import LabelledDataError, read_labelled, to_examples
from kevlike.eval.abstention import abstention_table, risk_coverage_plot
from kevlike.eval.heldout import reliability_plots
from kevlike.eval.probes import threshold_economics
from kevlike.eval.remote import RemoteEngine
from kevlike.metrics import records_from_logits, summarize, write_records
from kevlike.model.backbones import resolve_model
from kevlike.model.engine import Engine
from kevlike.model.modeldir import (check_profile_name, check_profile_target, load_temperatures, profile_source,
                                   save_profile)
from kevlike.model.temperatures import bound_hits_text, calibration_type, fit_line, fit_table
from kevlike.request.schema import RequestError
from kevlike.runs import git_commit, write_text_atomic

DEFAULT_COSTS = {"false_positive": 1.0, "false_negative": 1.0}


def read_costs(path: str | Path | None) -> dict:
    """``{"default": {...}, "questions": {qid: {...}}}`` from a costs file (None: the default costs).

    Raises:
        ValueError: unreadable YAML/JSON, unknown keys, or costs that are not numbers > 0.
    """
    if path is None:
        return {"default": dict(DEFAULT_COSTS), "questions": {}}

    try:
        raw = read_yaml(Path(path).read_text(encoding="utf-8"), f"--costs {path}") or {}
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--costs {path}: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(raw, dict) or set(raw) - {"default", "questions"}:
        raise ValueError(f"--costs {path}: expected a mapping with 'default' and/or 'questions'")

    def entry(v, where, base=DEFAULT_COSTS):
        if not isinstance(v, dict) or set(v) - set(DEFAULT_COSTS):
            raise ValueError(f"--costs {path}: {where} must be {{false_positive: X, false_negative: Y}}")
        out = dict(base)
        for k, x in v.items():
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
                raise ValueError(f"--costs {path}: {where}.{k} must be a number > 0, got {x!r}")
            out[k] = float(x)
        return out

    default = entry(raw.get("default", {}), "default")
    questions = raw.get("questions") or {}
    if not isinstance(questions, dict):
        raise ValueError(f"--costs {path}: questions must map question ids to costs")
    return {"default": default, "questions": {q: entry(v or {}, f"questions.{q}", default)
                                              for q, v in questions.items()}}


def check_cost_questions(costs: dict, items: list, path: str | Path | None) -> None:
    """Every question id of a costs file's ``questions`` names a yes/no question of the labelled file (costs
    price a yes/no decision: :func:`threshold_table`).

    Raises:
        ValueError: one line naming the id and the file's yes/no questions (a typo is never ignored)."""
    noul = sorted({q.id for it in items for q in it.parsed.questions if q.type == "noul"})
    for qid in costs["questions"]:
        if qid not in noul:
            raise ValueError(f"--costs {path}: questions.{qid}: no yes/no question {qid!r} in the labelled file (its "
                             f"yes/no questions: {', '.join(noul) or 'none'}); costs price yes/no decisions")


def answer_records(engine, items, batch_size: int = 4, progress: bool = False, calibrated: bool = True,
                   data_path: str | Path | None = None) -> list[dict]:
    """One record per labelled question (:mod:`kevlike.metrics` format, plus ``question`` and
    ``line``; ``cannot_tell`` and ``x_abstain`` as :func:`kevlike.metrics.records_from_logits`); set-mode choice
    questions get type ``choice:set``
    (:func:`kevlike.model.temperatures.calibration_type`) when ``calibrated`` is False (records to fit on).

    Raises:
        kevlike.data.labelled.LabelledDataError: a line over the model's token budgets (``data_path:LINE``), found
            before any forward pass (a local engine's :meth:`~kevlike.model.engine.Engine.prepare`)."""

    examples = to_examples(items)
    lines = [it.line for it in items if it.gold]
    if hasattr(engine, "prepare"):            # every line within the model's token budgets, named by its line
        for ex, line in zip(examples, lines):
            try:
                engine.prepare(ex.request)
            except RequestError as e:
                err = e.errors[0]
                loc = ".".join(str(x) for x in err["loc"][1:])
                raise LabelledDataError(data_path or "labelled file", line, f"request.{loc}" if loc else "request",
                                        err["msg"]) from None
    records = records_from_logits(engine, examples, batch_size, progress=progress, calibrated=calibrated)
    mode = getattr(engine, "option_mode", "list") if getattr(engine, "head", None) is not None else "list"
    i, out = 0, []
    for ex, line in zip(examples, lines):
        for _ in ex.request["questions"]:
            r = records[i]
            i += 1
            r["source"] = r["question"]
            r["line"] = line
            if not calibrated:
                r["type"] = calibration_type(r["type"], mode)
            out.append(r)
    return out


def threshold_table(records: list[dict], costs: dict) -> dict:
    """Per noul question id: :func:`kevlike.eval.probes.threshold_economics` with its costs, plus
    ``saving_vs_best_trivial`` (cost of the cheaper of always/never minus the cost at the Bayes threshold).
    A soft label counts as true when its P(true) ≥ 0.5."""

    by_q = defaultdict(list)
    for r in records:
        if r["type"] == "noul" and not r.get("cannot_tell"):
            by_q[r["question"]].append(r)
    out = {}
    for q, rs in sorted(by_q.items()):
        c = costs["questions"].get(q, costs["default"])
        t = threshold_economics([r["probs"][0] for r in rs], [r["target"][0] >= 0.5 for r in rs],
                                c["false_positive"], c["false_negative"])
        t.update(costs=c, saving_vs_best_trivial=min(t["cost_always"], t["cost_never"]) - t["cost_at_threshold"])
        out[q] = t
    return out


def evaluate_data(model: str | None, data: str | Path, out: str | Path = "runs", costs: str | Path | None = None, *,
                  options: EngineOptions = DEFAULT_OPTIONS, url: str | None = None, batch_size: int = 4,
                  quiet: bool = False, engine=None) -> Path:
    """``kevlike eval --data``: the run directory of the module docstring; returns its path.
    ``options``: how a local model is loaded (:meth:`kevlike.model.engine.Engine.from_pretrained`).

    Raises:
        FileNotFoundError, kevlike.data.labelled.LabelledDataError: the data file.
        ValueError: the costs file, or a model/profile/option mode that cannot be loaded.
        kevlike.eval.remote.RemoteError: ``url`` unreachable or answering errors.
    """

    cost_table = read_costs(costs)                  # before any model loads
    items = read_labelled(data)
    check_cost_questions(cost_table, items, costs)
    if engine is None and url is not None:
        engine = RemoteEngine(url, model)
    if engine is None:
        engine = Engine.from_pretrained(model, options)
    weighted = [it for it in items if it.weight != 1]
    if weighted:
        print(f"[kevlike] note: {data}: line {weighted[0].line} has weight {weighted[0].weight:g} ({len(weighted)} "
              f"weighted line(s)); weights steer training only, eval counts every question once", file=sys.stderr)
    records = answer_records(engine, items, batch_size, progress=not quiet, data_path=data)
    summary = summarize(records)
    summary["per_question"] = summary.pop("per_source")
    thresholds = threshold_table(records, cost_table)
    run_dir = Path(out) / f"eval-data-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=False)

    meta = {"model": engine.name, "data": str(data), "requests": len(items), "labelled_questions": len(records),
            "url": url, "temperatures": engine.temperatures.source, "option_mode": getattr(engine, "option_mode", None),
            "costs": cost_table, "git_commit": git_commit(), "dtype": getattr(engine, "dtype", None),
            "dtype_reason": getattr(engine, "dtype_reason", None)}
    write_records(run_dir / "records.jsonl", records)
    write_text_atomic(run_dir / "metrics.json", json.dumps({"meta": meta, **summary}, indent=2))
    write_text_atomic(run_dir / "thresholds.json", json.dumps(thresholds, indent=2))
    plots = reliability_plots(records, run_dir) + risk_coverage_plot(records, run_dir, group="question")
    md = report(summary, thresholds)
    if abst := abstention_table(summary, "per_question"):
        md += "\n\nAbstention (x_abstain; answer when x_abstain < t, docs/guide/abstention.md):\n\n" + abst
    write_text_atomic(run_dir / "report.md",
                      f"# kevlike eval --data {data}, model `{engine.name}`\n\n{len(items)} requests, "
                      f"{len(records)} labelled questions; temperatures: {meta['temperatures']}.\n\n"
                      f"{md}\n\n" + "".join(f"![{p}]({p})\n" for p in plots))
    print(md)                                   # the result: printed with --quiet too (it hides progress only)
    print(f"run directory: {run_dir}", file=sys.stderr)
    return run_dir


def report(summary: dict, thresholds: dict) -> str:
    """Markdown tables: per type, per question id, and the noul threshold table."""
    def row(name, s):
        return (f"| {name} | {s['n']} | {s['accuracy']:.3f} | {s['nll']:.3f} | {s['brier']:.3f} | {s['ece']:.3f} | "
                f"{s['confident_error']:.3f} | {s['coverage_at_5pct']:.3f} |")

    head = "| {} | n | accuracy | NLL | Brier | ECE | confident errors | coverage at 5 % |\n|---|---|---|---|---|---|---|---|\n"
    md = head.format("type") + "\n".join(row(k, v) for k, v in summary["per_type"].items() if v["n"])
    md += "\n\n" + head.format("question") + "\n".join(row(k, v) for k, v in summary["per_question"].items() if v["n"])
    if thresholds:
        md += ("\n\nThreshold economics (noul; mean cost per decision; act iff P(true) > κ_FP / (κ_FP + κ_FN)):\n\n"
               "| question | n | κ_FP | κ_FN | threshold | cost there | at 0.5 | always | never | saving vs best trivial | "
               "best in-sample threshold (cost) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
        md += "\n".join(f"| {q} | {t['n']} | {t['costs']['false_positive']:g} | {t['costs']['false_negative']:g} | "
                        f"{t['threshold']:.3f} | {t['cost_at_threshold']:.3f} | {t['cost_at_0.5']:.3f} | "
                        f"{t['cost_always']:.3f} | {t['cost_never']:.3f} | {t['saving_vs_best_trivial']:.3f} | "
                        f"{t['best_threshold']:.3f} ({t['cost_at_best']:.3f}) |" for q, t in thresholds.items())
    return md


def fit_profile(model: str | None, data: str | Path, profile: str, min_count: int = 50, *,
                options: EngineOptions = DEFAULT_OPTIONS, batch_size: int = 4, quiet: bool = False,
                records: list[dict] | None = None, engine=None) -> tuple[Path, dict]:
    """``kevlike calibrate MODEL --data FILE --profile NAME``: fit temperatures per (type, K-bucket) on the
    labelled questions (:func:`kevlike.model.temperatures.fit_table`: a bucket or type under ``min_count``
    questions, or without errors, falls back to its type's fitted temperature, else to the model's own
    temperatures from its ``calibration.json``, never to T = 1 in their place) and store them as profile ``NAME``
    (:func:`kevlike.model.modeldir.save_profile`). ``records``: already answered records (``logits``, ``gold``,
    ``type``), e.g. from the feedback store; then ``data`` only names their origin, and without ``engine`` no
    weights load (:func:`~kevlike.model.backbones.resolve_model` with ``backbone=False``: only the model's directory
    is read, so a model whose backbone is not fetched is recalibrated without a download). Returns the
    profile's path and the fit report. ``options``: how the model is loaded to compute the logits (as
    :meth:`kevlike.model.engine.Engine.from_pretrained`: fit in the precision and option mode you serve in).

    Raises:
        ValueError: a bad profile name, a profile path that cannot be written (checked before the fit), a model
            that is not a decision model, no labelled question, or no
            temperature fitted at all (every type under ``min_count``, without a wrong answer, or at a search
            bound: the profile would be the model's own temperatures; nothing is written).
    """

    check_profile_name(profile)
    items = read_labelled(data) if records is None else None      # before any model loads
    if engine is None and records is not None:     # recorded logits: the model's directory is all the fit needs
        resolved = resolve_model(model, backbone=False)
        name, artifact_dir, dtype = resolved.name, resolved.artifact_dir, None
    else:
        if engine is None:
            engine = Engine.from_pretrained(model, options)
        name, artifact_dir = engine.name, engine.artifact_dir
        dtype = None if getattr(engine, "dtype", None) is None else f"{engine.dtype} ({engine.dtype_reason})"
    if artifact_dir is None:
        raise ValueError(f"model {name!r} is not a decision-model directory; profiles calibrate decision models")
    check_profile_target(artifact_dir, name.split("@")[0], profile)    # before the fit
    if records is None:
        records = answer_records(engine, items, batch_size, progress=not quiet, calibrated=False, data_path=data)
    if not records:
        raise ValueError(f"{data}: no labelled question to fit on")
    read_out = [r for r in records if r.get("score_readout") == "normal"]
    if read_out:      # served outcomes: the store keeps what was served, which under this readout is no softmax
        records = [r for r in records if r.get("score_readout") != "normal"]
        print(f"{len(read_out)} score answer(s) served through the normal readout left out of the fit (recorded "
              f"without the softmax they were read out from, by a server before stage 28: the store keeps only their "
              f"served probabilities, not logits): the model's own score temperature and readout stay for them",
              file=sys.stderr)
        if not records:
            raise ValueError(f"{data}: no labelled question to fit on besides score answers served through the "
                             f"normal readout")
    counts, cannot = defaultdict(int), 0
    for r in records:         # answerable questions per type, as the fit counts them; "cannot tell" apart
        if r.get("cannot_tell"):
            cannot += 1
        else:
            counts[r["type"]] += 1
    # a type or bucket too small to fit keeps the model's own (fitted) temperature, not T = 1
    own = load_temperatures(artifact_dir)
    per_type = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    table, fit = fit_table(records, min_count, f"profile {profile!r}: fitted on {data} "
                                               f"({per_type}{f'; cannot tell: {cannot}' if cannot else ''}); "
                                               f"elsewhere the model's own temperatures", base=own,
                   abstain_where_asked=False)   # the file's own share of "cannot tell", over all its questions
    for t, e in fit["types"].items():          # the result: printed with --quiet too (it hides progress only)
        print(fit_line(t, e), file=sys.stderr)
    if not any("temperature" in e for part in ("types", "buckets") for e in fit[part].values()):
        raise ValueError(f"{data}: no temperature could be fitted, so profile {profile!r} was not written (it would "
                         f"serve the model's own temperatures): a type needs --min-count {min_count} answered "
                         f"questions, at least one of them answered wrong, and a fit inside the search bounds; "
                         f"here {per_type or 'none'}{f', cannot tell: {cannot}' if cannot else ''}")
    if dtype is not None:       # the precision the logits were computed in (recorded ones: the server's, unknown here)
        fit["dtype"] = dtype
    before = profile_source(artifact_dir, name.split("@")[0], profile)
    path = save_profile(artifact_dir, name.split("@")[0], profile, table, fit)
    if (note := bound_hits_text(fit)) is not None:
        print(f"warning: {note}", file=sys.stderr)
    replaced = "" if before is None else f" (replaced the profile {before})"
    print(f"profile {profile!r}: {path}{replaced}", file=sys.stderr)
    return path, fit
