"""Stage 45's figures on the realistic pages, per model: accuracy by type, coverage at <= 5 % error (by x_abstain and
by P(right)) on `realistic` (validation half), `realistic_fresh` and both, and on `realistic_fresh` its pair and
absurd tags (P(yes|Q) + P(yes|Q') within 0.1, not both above 0.5, absurd P(yes) < 0.2).

    python docs/results/stage45/fresh_figures.py NAME=RECORDS[,RECORDS...] ...

e.g. R6=docs/results/stage43/R6_amx_validation_records.jsonl.gz,docs/results/stage45/R6_fresh_records.jsonl.gz

Since stage 47 this runs docs/results/stage47/fresh_figures.py, which also reads `realistic_fresh2`; given records
without that split it prints exactly the lines this script printed.
"""
import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parents[1] / "stage47" / "fresh_figures.py"), run_name="__main__")
