"""Write a built-in dataset split as a labelled JSONL file (the format of ``kevlike eval --data`` and
``kevlike calibrate --data``; see kevlike/data/labelled.py) — to try the own-data commands on public data
the default model was never trained on, e.g. the held-out ``sys1_phishing_email`` source::

    python scripts/export_labelled.py sys1_phishing_email --split validation --n 150 --out phishing-cal.jsonl
    python scripts/export_labelled.py sys1_phishing_email --split test --n 150 --out phishing-test.jsonl

Each line is ``{"request": <Jev request>, "gold": {question id: answer}}`` with the answers as a user
would write them (``true``/``false``, option keys, level indices).
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    from kevlike.data.tasks import TASKS, eval_examples
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task", help=f"a built-in task ({', '.join(TASKS)})")
    ap.add_argument("--split", default="test", choices=["train", "validation", "test"], help="dataset split (default test)")
    ap.add_argument("--n", type=int, default=200, help="requests (seeded sample; default 200)")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    ap.add_argument("--out", required=True, help="the JSONL file to write")
    args = ap.parse_args(argv)
    if args.task not in TASKS:
        ap.error(f"unknown task {args.task!r}")
    examples = eval_examples(args.task, args.split, args.n, seed=args.seed)
    with open(args.out, "w", encoding="utf-8") as f:
        for ex in examples:
            request = {"state": ex.request["state"], "questions": ex.request["questions"]}
            gold = {}
            for qid, q in ex.request["questions"].items():
                key = ex.gold[qid]
                gold[qid] = key == "true" if q["type"] == "noul" else int(key) if q["type"] == "score" else key
            f.write(json.dumps({"request": request, "gold": gold}, ensure_ascii=False) + "\n")
    print(f"{len(examples)} labelled requests ({args.task}, {args.split}) -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
