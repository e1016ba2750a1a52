"""Stage 48's figures on the realistic pages, per model: accuracy by type, on the `number`-tagged questions, and
coverage at <= 5 % error (by x_abstain and by P(right)) on `realistic` (validation half), on every batch of fresh
pages the records hold (kevlike.eval.realistic.FRESH_FILES: three in stage 48, four since stage 50) and pooled; on
each fresh batch its pair and absurd tags (P(yes|Q) + P(yes|Q') within 0.1, not both above 0.5, absurd P(yes) <
0.2). Stage 47's script (docs/results/stage47/fresh_figures.py) over any number of fresh batches, with the `number`
column.

    python docs/results/stage48/fresh_figures.py NAME=RECORDS[,RECORDS...] ...

e.g. R6=docs/results/stage43/R6_amx_validation_records.jsonl.gz,docs/results/stage45/R6_fresh_records.jsonl.gz,\
docs/results/stage47/R6_fresh2_records.jsonl.gz,docs/results/stage48/R6_fresh3_records.jsonl.gz
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from kevlike.eval.generalization import realistic_tag_figures, realistic_tags  # noqa: E402
from kevlike.eval.realistic import FRESH_FILES, REALISTIC_FILE  # noqa: E402
from kevlike.metrics import _area_and_coverage, correct, read_records, risk_coverage  # noqa: E402

TAGS = {k: v for split, path in (("realistic", REALISTIC_FILE), *FRESH_FILES.items())
        for k, v in realistic_tags(path, split).items()}
SPLITS = ("realistic", *FRESH_FILES)


def _share(rs) -> str:
    return f"{sum(correct(r) for r in rs) / len(rs):.3f} ({len(rs)})" if rs else "–"


for arg in sys.argv[1:]:
    name, paths = arg.split("=", 1)
    recs = [r for p in paths.split(",") for r in read_records(p)
            if r.get("half") == "validation" and r["split"] in SPLITS]
    present = [s for s in SPLITS if any(r["split"] == s for r in recs)]
    fresh = tuple(s for s in present if s in FRESH_FILES)
    groups = [(s,) for s in present] + [g for g in (fresh, tuple(present)) if len(g) > 1]
    for splits in dict.fromkeys(groups):
        rs = [r for r in recs if r["split"] in splits]
        by_type = {t: _share([r for r in rs if r["type"] == t]) for t in ("noul", "choice", "score")}
        number = _share([r for r in rs if "number" in TAGS[(r["source"], r["question"])]])
        cov = {by: _area_and_coverage(risk_coverage(rs, by), 0.05)[1] for by in ("x_abstain", "p_right")}
        print(f"{name} {' + '.join(splits)}: accuracy {_share(rs)}; by type {by_type}; number {number}; coverage at "
              f"<= 5 % error by x_abstain {cov['x_abstain']:.3f}, by P(right) {cov['p_right']:.3f}")
    for split in FRESH_FILES:
        f = realistic_tag_figures(recs, FRESH_FILES[split], split)
        if f["pairs"]:
            print(f"{name} {split} pairs ({f['pairs']}): sum within 0.1 {f['sum_within_0.1']:.3f}, not both yes "
                  f"{f['not_both_yes']:.3f}; absurd ({f['absurd']}) P(yes) < 0.2 {f['absurd_p_yes_below_0.2']:.3f}")
