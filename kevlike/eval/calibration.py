"""``kevlike calibrate ARTIFACT``: fit the temperatures of a decision model on validation data
(DESIGN.md §9) and write them into its ``calibration.json``.

Validation questions come from the *validation* splits of the tasks the artifact was trained on
(never test), asked as in evaluation (intents over their full label set). The uncalibrated logits
are fitted per (type, K-bucket) by :func:`kevlike.model.temperatures.fit_table`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace as _replace
from datetime import datetime
from pathlib import Path

from kevlike.config.engine import DEFAULT_OPTIONS, EngineOptions
from kevlike.data.tasks import TASKS, eval_examples
from kevlike.metrics import choice_records, read_records, records_from_logits
from kevlike.model.engine import Engine
from kevlike.model.modeldir import ModelDir, calibration_fit, load_temperatures, save_calibration
from kevlike.model.temperatures import (MIN_BUCKET, TemperatureTable, abstain_records, bound_hits_text, fit_line,
                                        fit_table)


def calibrate_artifact(artifact: str | Path, n: int = 200, records_path: str | Path | None = None,
                       batch_size: int = 4, quiet: bool = False, min_count: int | None = None,
                       out: str | Path = "runs", tasks: list[str] | None = None, *,
                       options: EngineOptions = DEFAULT_OPTIONS, fit_mode: str | None = None) -> dict:
    """Fit and write temperatures; returns the fit report (with validation NLL at T = 1 and fitted).

    The validation logits are written to ``OUT/calibrate-STAMP/records.jsonl`` (with the report), so
    a later call can refit from them: ``records_path`` skips the forward passes. Raises ValueError if
    ``artifact`` is not a decision-model directory, or ``tasks`` names an unknown task (``tasks``:
    the tasks whose validation splits are used; default the artifact's training tasks).
    ``options``: how the model is loaded (:meth:`kevlike.model.engine.Engine.from_pretrained`; ``dtype``: the
    weight precision the validation logits are computed in, recorded in the report). ``options.option_orders``:
    the engine's option orders to fit the temperatures for; None: the artifact's. The value is written to
    ``kevlike.json``, so serving uses the setting the temperatures were fitted with.
    ``fit_mode``: ``list``, ``set`` or ``both`` (None: both): the option modes whose choice temperatures
    are fitted; set-mode choice questions are stored as type ``choice:set``. With ``records_path``, ``set``
    says the records come from a set-mode run: their choice records fit ``choice:set`` alone, every other
    type is kept; ``list`` and ``both`` fit each type of the records as it is written
    (:func:`kevlike.model.temperatures.calibration_type`). Temperatures of types not fitted in this call (e.g.
    ``choice:set`` with ``list``) are kept from the existing ``calibration.json``. Raises ValueError for
    a mode the model was not trained for.
    """
    option_orders = options.option_orders

    artifact = Path(artifact)
    model_dir = ModelDir(artifact)
    if not ModelDir.holds_one(artifact):
        raise ValueError(f"{artifact} is not a decision-model directory (no {ModelDir.MANIFEST})")
    manifest = model_dir.manifest()
    if "ensemble" in manifest and records_path is None:
        raise ValueError(f"{artifact} is an ensemble: calibrate it on the records of an eval run of it (kevlike eval "
                         f"--model {artifact} --suite generalization --half validation, then kevlike calibrate "
                         f"{artifact} --records RUN/records.jsonl)")
    trained = manifest.get("option_modes", ["list"])
    modes = trained if fit_mode in (None, "both") else [fit_mode]
    if any(m not in trained for m in modes):
        raise ValueError(f"--option-mode {fit_mode}: {artifact} was trained for option mode(s) {', '.join(trained)}")
    if tasks is None:
        tasks = sorted((manifest.get("training", {}).get("config", {}).get("tasks") or {"banking77": {}}).keys())
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise ValueError(f"--data: unknown task(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(TASKS)}")
    precision = None      # unknown when refitting from earlier logits
    if records_path is not None:
        records = read_records(records_path)
        if fit_mode == "set":   # the records of a set-mode run (`kevlike eval --option-mode set`): its answerable
            records = [{**{k: v for k, v in r.items() if k != "abstain_logit"}, "type": "choice:set"}   # choice
                       for r in records if r["type"] == "choice" and not r.get("cannot_tell")]    # questions only
    else:
        engine = Engine.from_pretrained(artifact, options, option_mode="list")
        precision = f"{engine.dtype} ({engine.dtype_reason})"
        option_orders = engine.option_orders
        set_engine = Engine(engine.model, engine.encoder.tokenizer, name=engine.name, head=engine.head,
                            backend=engine.backend, option_mode="set") if "set" in modes else None
        records = []
        for t in tasks:
            exs = eval_examples(t, "validation", n, seed=0, noul_twins=1)  # intents also feed the noul temperature
            if not quiet:
                print(f"{t}: {len(exs)} validation requests", file=sys.stderr)
            if "list" in modes:
                records.extend(records_from_logits(engine, exs, batch_size, progress=not quiet, calibrated=False))
            if set_engine is not None:
                records.extend({**r, "type": "choice:set"} for r in choice_records(
                    set_engine, exs, batch_size, progress=not quiet, calibrated=False))

        run_dir = Path(out) / f"calibrate-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        run_dir.mkdir(parents=True, exist_ok=False)
        records_path = run_dir / "records.jsonl"
        with open(records_path, "w") as f:
            for r in records:
                f.write(json.dumps({k: r[k] for k in ("source", "type", "logits", "gold", "abstain_logit", "cannot_tell")
                                    if k in r}) + "\n")
        print(f"validation logits: {records_path}", file=sys.stderr)   # written: said with --quiet too
    sizes = {}
    for r in records:          # per dataset (the source's part before "/"): the fit report lists every source
        name = r["source"].split("/")[0]
        sizes[name] = sizes.get(name, 0) + 1
    counts = ", ".join(f"{k}: {v} questions" for k, v in sorted(sizes.items()))
    table, report = fit_table(records, min_count if min_count is not None else MIN_BUCKET,
                              f"fitted on validation splits ({counts})")
    if not table.by_type and not table.by_bucket:
        table = TemperatureTable(source=f"T = 1 everywhere: no type could be fitted (too few validation questions "
                                        f"with errors, or a fit at a search bound) ({counts})")
    abst = abstain_records(records)            # what x_abstain's scaling was fitted on (fit_table)
    # x_abstain's scaling counts as fitted only where "cannot tell" was asked: records without a single one say
    # nothing about abstention, so the file's scaling (if any) stays and their fallback entry is not reported
    asked = any(r.get("cannot_tell") for r in abst)
    # an option type counts as fitted where it has answerable records (fit_table leaves "cannot tell" ones out of
    # the option temperatures): a type asked only as "cannot tell" keeps the file's temperature
    fitted = ({r["type"] for r in records if not r.get("cannot_tell")}
              | ({"abstain"} if "abstain" in report["types"] and asked else set()))
    if "abstain" not in fitted and model_dir.calibration_path.is_file():
        report["types"].pop("abstain", None)
    for t, e in report["types"].items():     # each type names the records it was fitted on, so that a later
        of_t = {}                             # fit that keeps it need not nest this fit's source in its own
        for r in (abst if t == "abstain" else [r for r in records if r["type"] == t and not r.get("cannot_tell")]):
            of_t[r["source"]] = of_t.get(r["source"], 0) + 1
        e["source"] = "validation records (" + ", ".join(f"{k}: {v}" for k, v in sorted(of_t.items())) + ")"
    # (a type fitted in this call replaces the file's, a fallback included: the report says what is served)
    if model_dir.calibration_path.is_file():  # keep the temperatures of types not fitted in this call

        old = load_temperatures(artifact)
        old_types = {k: v for k, v in old.by_type.items() if k not in fitted}
        old_buckets = {k: v for k, v in old.by_bucket.items() if k[0] not in fitted}
        kept = sorted(set(old_types) | {k[0] for k in old_buckets})
        table = _replace(table, by_type={**old_types, **table.by_type}, by_bucket={**old_buckets, **table.by_bucket},
                         abstain_bias=table.abstain_bias if "abstain" in fitted else old.abstain_bias,
                         score_readout=table.score_readout if "score" in fitted else old.score_readout,
                         source=table.source + (f"; {', '.join(kept)} kept from earlier fits (each type's "
                                                f"records: the fit report's types.TYPE.source)" if kept else ""))
        old_fit = calibration_fit(artifact) or {}     # the report keeps the kept types' entries too
        for key in ("types", "buckets"):
            report[key] = {**{k: v for k, v in (old_fit.get(key) or {}).items()
                              if k.split("/")[0] not in fitted}, **report[key]}
        earlier = list(old_fit.get("earlier_sources") or [])  # a kept entry from before types named their records
        for t in kept:                                         # points at the earlier file's source, kept once
            e = report["types"].get(t)
            if e is None or "source" not in e:
                if old.source not in earlier:
                    earlier.append(old.source)
                if e is not None:
                    e["source"] = f"earlier_sources[{earlier.index(old.source)}]"
        if earlier:
            report["earlier_sources"] = earlier
    for t, e in report["types"].items():  # accuracy at T = 1 (the argmax does not depend on T)
        rs = [r for r in records if r["type"] == t and not r.get("cannot_tell")]
        if not rs:                        # the abstention temperature's entry (no options)
            continue
        e["accuracy"] = sum(max(range(len(r["logits"])), key=lambda k: r["logits"][k]) == r["gold"] for r in rs) / len(rs)
    if precision is not None:
        report["dtype"] = precision
    if option_orders is not None:
        report["option_orders"] = option_orders
        manifest["option_orders"] = option_orders
        model_dir.write_manifest(manifest)
    save_calibration(artifact, table, report)
    for t, e in report["types"].items():        # the result: printed with --quiet too (it hides progress only)
        print(fit_line(t, e))
    for b, e in report["buckets"].items():
        print(f"  {b}: n={e['n']} " + (f"T={e['temperature']:.3f}" if "temperature" in e else e["fallback"]))
    if (note := bound_hits_text(report)) is not None:
        print(f"warning: {note}", file=sys.stderr)
    return report
