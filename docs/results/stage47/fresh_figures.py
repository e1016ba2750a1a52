"""Stage 47's figures on the realistic pages, per model: accuracy by type and coverage at <= 5 % error (by x_abstain
and by P(right)) on `realistic` (validation half), `realistic_fresh`, `realistic_fresh2` and their union, and on
each fresh split its pair and absurd tags (P(yes|Q) + P(yes|Q') within 0.1, not both above 0.5, absurd P(yes) < 0.2).
Stage 45's script (docs/results/stage45/fresh_figures.py) with the second batch of fresh pages.

    python docs/results/stage47/fresh_figures.py NAME=RECORDS[,RECORDS...] ...

e.g. R6=docs/results/stage43/R6_amx_validation_records.jsonl.gz,docs/results/stage45/R6_fresh_records.jsonl.gz,\
docs/results/stage47/R6_fresh2_records.jsonl.gz
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from kevlike.eval.generalization import realistic_tag_figures  # noqa: E402
from kevlike.eval.realistic import FRESH_FILES  # noqa: E402
from kevlike.metrics import _area_and_coverage, correct, read_records, risk_coverage  # noqa: E402

GROUPS = (("realistic",), ("realistic_fresh",), ("realistic_fresh2",), ("realistic", "realistic_fresh"),
          ("realistic", "realistic_fresh", "realistic_fresh2"))

for arg in sys.argv[1:]:
    name, paths = arg.split("=", 1)
    recs = [r for p in paths.split(",") for r in read_records(p) if r.get("half") == "validation"]
    for splits in GROUPS:
        rs = [r for r in recs if r["split"] in splits]
        if not rs or not all(any(r["split"] == s for r in rs) for s in splits):
            continue
        by_type = {t: f"{sum(correct(r) for r in rs if r['type'] == t) / n:.3f} ({n})"
                   for t in ("noul", "choice", "score") if (n := sum(r["type"] == t for r in rs))}
        cov = {by: _area_and_coverage(risk_coverage(rs, by), 0.05)[1] for by in ("x_abstain", "p_right")}
        print(f"{name} {' + '.join(splits)}: n {len(rs)}, accuracy {sum(correct(r) for r in rs) / len(rs):.3f}; "
              f"by type {by_type}; coverage at <= 5 % error by x_abstain {cov['x_abstain']:.3f}, by P(right) "
              f"{cov['p_right']:.3f}")
    for split in FRESH_FILES:
        f = realistic_tag_figures(recs, FRESH_FILES[split], split)
        if f["pairs"]:
            print(f"{name} {split} pairs ({f['pairs']}): sum within 0.1 {f['sum_within_0.1']:.3f}, not both yes "
                  f"{f['not_both_yes']:.3f}; absurd ({f['absurd']}) P(yes) < 0.2 {f['absurd_p_yes_below_0.2']:.3f}")
