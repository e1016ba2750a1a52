"""Ablations of the default recipe (issue 12, item 6; the model card's ablation table): short training
runs at equal budget from the same start, each removing one ingredient, scored on the unseen splits of
``kevlike eval --suite generalization`` against the full recipe.

Every variant is ``kevlike train configs/negation.yaml`` (the shipped stage's data mix) with the same
seed, steps, learning rates and data stream, choice options read as a list (``set_share=0``), started from
``--start`` — by default stage 2 of the shipped model, the last stage before question families, negation
and schema augmentation (its pointer head already reads options, so a short run teaches the families;
from the bare backbone, 80 steps left validation accuracy at 0.30–0.35, too little to compare anything;
removing an ingredient from a model already trained with it measures mostly nothing) — and one change:

==============  =====================================================================================
``full``        the recipe as it is
``no_perm``     ``loss.perm=0``: no permutation/twin KL term (twins are still drawn, their CE kept)
``no_ord``      ``loss.ord=0``: no ranked-probability term on score questions
``ce_only``     ``loss.perm=0 loss.ord=0``: cross-entropy alone (the control every ablation table carries)
``no_negation`` ``negation=false`` on every family source: no negated yes/no phrasings, no negation
                twins, no negation frames
``no_augment``  ``augment=false`` on every family source: one wording per family, word keys, no
                descriptions, no distractor options
``abstain``     the reverse of a removal: adds x_abstain's none key (``head.abstain=true``, ``loss.abstain=1``) and
                its two sources (``abstain_docs`` 0.08, ``abstain_snli`` 0.06: about 6 % of the reading mix's
                draws), to measure whether the abstention data costs answerable accuracy (issue 33)
``start``       (``--variants start``) no training: the starting model itself, the table's baseline
==============  =====================================================================================

Stage 2's weights are in git history: ``python scripts/ablations.py --extract-stage2`` writes them to
``runs/stage2`` (``git show 8413357:kevlike/models/default/…``).

Each model is then evaluated with ``kevlike eval --suite generalization --option-mode list [--n N]``; the
accuracies are temperature-free, NLL/ECE are read *uncalibrated* (no variant's temperatures are fitted:
equal treatment, and the fit would cost more CPU than the training). Results: one JSON and one
markdown table in ``--out``. Rerun to continue: a variant with an artifact is not trained again, one with
only a checkpoint resumes from it (``kevlike train --resume``), one with an eval is not evaluated again.

    python scripts/ablations.py --extract-stage2
    python scripts/ablations.py --steps 50 --eval-n 8 --jobs 1      # the model card's run
    python scripts/ablations.py --steps 200 --jobs 2                # a larger budget, full suite

Issue 31's ablation of the coherence (twin) term runs the reading mix from the shipped model and scores
the validation half only (no choice may read the test half):

    python scripts/ablations.py --config configs/reading.yaml --start kevlike/models/default \
        --variants full,no_perm,ce_only,start --steps 150 --lr 1e-4 --half validation --jobs 1 \
        --out runs/ablations_reading

A second (third) seed of the same arms, for the spread of the twin term's effect (each seed its own ``--out``):

    python scripts/ablations.py --config configs/reading.yaml --start kevlike/models/default \
        --variants full,ce_only --seed 1 --steps 150 --lr 1e-4 --half validation --jobs 1 \
        --out runs/ablations_reading_seed1

The same script compares backbones (the model card's "Backbone comparison"): the full recipe from each
bare backbone (``--start ''``), same data, seed, steps and learning rate, the fresh pointer head scaled
to the backbone's final norm (``head.scale_init``); each backbone needs its own ``--out``:

    python scripts/ablations.py --start '' --backbone qwen2.5-coder-0.5b-instruct --variants full --steps 100 \
        --lr 3e-4 --eval-n 8 --jobs 1 --out runs/compare/qwen
    python scripts/ablations.py --start '' --backbone smollm2-135m-instruct --variants full --steps 100 \
        --lr 3e-4 --eval-n 8 --jobs 1 --out runs/compare/smollm2

Wall time on a 2-core AMD EPYC (AVX2), 1 thread per job beside another 1-thread job: ~12 s per optimizer
step (4 requests); an evaluation ~5 min with ``--eval-n 8``, ~20 min for the full suite.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kevlike.training.config import load_config

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "configs" / "negation.yaml")
VARIANTS = ("full", "no_perm", "no_ord", "ce_only", "no_negation", "no_augment", "abstain")


def overrides(variant: str, steps: int, out: Path, tasks: dict, start: str = "runs/stage2",
              lr: float = 2e-4, backbone: str | None = None, seed: int | None = None) -> list[str]:
    """``kevlike train`` overrides of one variant (the shared budget first, then its one change).

    Raises:
        ValueError: unknown variant, or a ``backbone`` with a ``start`` model (a model fixes its backbone).
    """
    if backbone and start:
        raise ValueError("--backbone needs --start '' (training from the bare backbone): a start model fixes its own")
    common = [*([f"backbone={backbone}"] if backbone else []), *([f"seed={seed}"] if seed is not None else []),
              f"name={variant}", f"output_dir={out / 'train'}",
              f"init_from={start or 'null'}", f"max_steps={steps}",
              f"optim.lr={lr}", f"optim.head_lr={2.5 * lr}", "optim.warmup=0.1", "max_minutes=null", "set_share=0",
              "validation.n=1", f"eval_every={steps}", "patience=100", "checkpoint_every=10"]
    family = [t for t in tasks if not t.startswith("sys1_")]          # sys1bench rows are typed requests
    change = {"full": [], "no_perm": ["loss.perm=0"], "no_ord": ["loss.ord=0"], "ce_only": ["loss.perm=0", "loss.ord=0"],
              "no_negation": [f"tasks.{t}.negation=false" for t in family],
              "no_augment": [f"tasks.{t}.augment=false" for t in family],
              "abstain": ["head.abstain=true", "loss.abstain=1.0", "tasks.abstain_docs.weight=0.08",
                          "tasks.abstain_snli.weight=0.06"]}
    if variant == "start":
        if not start:
            raise ValueError("the start variant needs a --start model: the suite scores pointer heads, and a bare "
                             "backbone has none")
        return []                       # the starting model itself, evaluated untrained (the table's baseline)
    if variant not in change:
        raise ValueError(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})")
    return common + change[variant]


STAGE2_COMMIT = "8413357"
STAGE2_FILES = ("kevlike.json", "calibration.json", "head.safetensors", "delimiters.safetensors",
                "adapter/adapter_config.json", "adapter/adapter_model.safetensors")


def extract_stage2(dest: Path) -> None:
    """Stage 2 of the shipped model (commit 8413357's ``kevlike/models/default``) into ``dest``."""
    for f in STAGE2_FILES:
        blob = subprocess.run(["git", "-C", str(ROOT), "show", f"{STAGE2_COMMIT}:kevlike/models/default/{f}"],
                              check=True, capture_output=True).stdout
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        (dest / f).write_bytes(blob)
    print(f"stage 2 written to {dest}")


def latest(pattern: str) -> Path | None:
    hits = sorted(glob.glob(pattern))
    return Path(hits[-1]) if hits else None


def run_variant(variant: str, args, tasks: dict, backbone: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), KEVLIKE_THREADS=str(args.threads))
    out = Path(args.out)
    if variant == "start":
        art = Path(args.start)
    else:
        art = latest(str(out / "train" / f"{variant}-*" / "artifact"))
        if art is not None and (art / "kevlike.json").exists():
            trained_on = json.loads((art / "kevlike.json").read_text())["backbone"]
            if trained_on != backbone:
                raise SystemExit(f"{art} was trained on {trained_on}, not {backbone}: give each backbone its own --out")
        else:
            started = latest(str(out / "train" / f"{variant}-*" / "checkpoint" / "state.pt"))
            fresh = overrides(variant, args.steps, out, tasks, args.start, args.lr, args.backbone, args.seed)
            cmd = (["kevlike", "train", "--resume", str(started.parent.parent), "--quiet"] if started is not None else
                   ["kevlike", "train", args.config, *fresh, "--quiet"])
            with open(out / f"{variant}.train.log", "w") as log:
                subprocess.run(cmd, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)
            art = latest(str(out / "train" / f"{variant}-*" / "artifact"))
    ev_dir = out / "eval" / variant
    metrics = latest(str(ev_dir / "eval-*" / "metrics.json"))
    if metrics is None:
        cmd = ["kevlike", "eval", "--model", str(art), "--suite", "generalization", "--option-mode", "list",
               "--out", str(ev_dir), "--quiet", *(["--n", str(args.eval_n)] if args.eval_n else []),
               *(["--half", args.half] if args.half else [])]
        with open(out / f"{variant}.eval.log", "w") as log:
            subprocess.run(cmd, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)
        metrics = latest(str(ev_dir / "eval-*" / "metrics.json"))
    records = [json.loads(x) for x in (Path(metrics).parent / "records.jsonl").read_text().splitlines() if x.strip()]
    return summarize(variant, json.loads(Path(metrics).read_text()), art, records)


def negated_accuracy(records: list[dict], split: str) -> float:
    """Accuracy on the negated yes/no family (``SOURCE/noul_negated``) of one split."""
    recs = [r for r in records if r["split"] == split and r["source"].endswith("/noul_negated")]
    right = sum(max(range(len(r["probs"])), key=r["probs"].__getitem__) == r["gold"] for r in recs)
    return right / len(recs) if recs else float("nan")


def summarize(variant: str, m: dict, art: Path, records: list[dict] = ()) -> dict:
    g = m["generalization_uncalibrated"]
    s = g["splits"]
    row = {"variant": variant, "artifact": str(art), "n": m["overall"]["n"]}
    for split in ("seen_wording", "heldout_wording", "heldout_source", "bigbench"):
        row[split] = s[split]["accuracy"] if split in s else float("nan")   # bigbench: skipped without its archive
    row["heldout_source_nll"] = s["heldout_source"]["nll"]
    row["heldout_source_ece"] = s["heldout_source"]["ece"]
    row["wording_gap"] = g["wording_gap"]
    row["spam_balanced"] = s["target/spam_balanced"]["accuracy"]
    row["sentiment5"] = s["target/sentiment5"]["accuracy"]
    row["contrast_both_right"] = g["contrast"]["both_right"]
    row["coherence_negation"] = g["contrast"]["coherence"]["negation"]
    row["contrast_apart_both_right"] = g["contrast_apart"]["both_right"] if "contrast_apart" in g else float("nan")
    row["negated_seen"] = negated_accuracy(records, "seen_wording")
    row["negated_heldout"] = negated_accuracy(records, "heldout_wording")
    t = g.get("targets", {})            # issue 31's targets (suites since the halves)
    for key, col in TARGET_COLUMNS.items():
        row[col] = t[key]["value"] if key in t and t[key]["value"] is not None else float("nan")
    return row


TARGET_COLUMNS = {"realistic_accuracy": "realistic", "absurd_p_yes_below_0.2": "absurd_below_0.2",
                  "negation_sum_within_0.1": "negation_sum_0.1", "opposites_not_both_yes": "opposites_ok",
                  "unseen_accuracy": "unseen"}
COLUMNS = ("seen_wording", "heldout_wording", "heldout_source", "bigbench", "heldout_source_nll",
           "heldout_source_ece", "wording_gap", "negated_seen", "negated_heldout", "spam_balanced", "sentiment5",
           "contrast_both_right", "coherence_negation", "contrast_apart_both_right", *TARGET_COLUMNS.values())


def table(rows: list[dict]) -> str:
    head = "| variant | " + " | ".join(COLUMNS) + " |\n|---|" + "---:|" * len(COLUMNS) + "\n"
    return head + "".join("| " + r["variant"] + " | " + " | ".join(f"{r.get(c, float('nan')):.3f}" for c in COLUMNS) + " |\n"
                          for r in rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=80, help="optimizer steps per variant (4 requests each)")
    p.add_argument("--jobs", type=int, default=2, help="variants trained/evaluated at the same time")
    p.add_argument("--threads", type=int, default=1, help="torch threads per job")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    p.add_argument("--out", default="runs/ablations", help="folder for runs, evals, logs and the table")
    p.add_argument("--start", default="runs/stage2", help="model every variant starts from ('' : the bare backbone)")
    p.add_argument("--backbone", default=None,
                   help="train from this bare backbone (with --start ''), e.g. qwen2.5-coder-0.5b-instruct for the "
                        "backbone comparison")
    p.add_argument("--seed", type=int, default=None,
                   help="the training seed of every variant (data stream, LoRA and head init); default: the config's. "
                        "The suite's items do not depend on it")
    p.add_argument("--lr", type=float, default=2e-4, help="LoRA learning rate (the head's is 2.5x)")
    p.add_argument("--eval-n", type=int, default=None, help="kevlike eval --n: items per source (default: the suite's)")
    p.add_argument("--config", default=CONFIG, help="the training config every variant runs (default: %(default)s)")
    p.add_argument("--half", choices=("validation", "test"), default=None,
                   help="kevlike eval --half: score one half of the suite (choices read the validation half)")
    p.add_argument("--extract-stage2", action="store_true", help="write stage 2's weights to runs/stage2 and stop")
    args = p.parse_args(argv)
    if args.extract_stage2:
        extract_stage2(ROOT / "runs" / "stage2")
        return 0
    variants = args.variants.split(",")
    config = load_config(args.config)                 # resolved: a key the file leaves out takes its default
    tasks, backbone = config.tasks, args.backbone or config.backbone
    for v in variants:
        try:                                                                       # fail before any work
            overrides(v, args.steps, Path(args.out), tasks, args.start, args.lr, args.backbone)
        except ValueError as e:
            p.error(str(e))
    if args.backbone:   # set up once here: parallel jobs would each convert it and race on the cache folder
        from kevlike.model.backbones import fetch_backbone

        fetch_backbone(args.backbone)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda v: run_variant(v, args, tasks, backbone), variants))
    Path(args.out, "ablations.json").write_text(json.dumps({"steps": args.steps, "rows": rows}, indent=1))
    Path(args.out, "ablations.md").write_text(table(rows))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
