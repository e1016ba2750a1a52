"""Stage 46: how well R6 reads its negation twins. From T's records (pooled logits: the mean of the question's and
its twin's log_softmax, the twin flipped into the question's option order) and R6's records of the same questions
(the question alone), the twin's own log-probabilities are 2 * pooled - log_softmax(question), up to float rounding
of the two bf16 passes. Prints per split the yes/no accuracy of the question alone, of the twin alone and of the pool.

    python docs/results/stage46/twin_alone.py docs/results/stage46/T_validation_records.jsonl.gz \
        docs/results/stage43/R6_amx_validation_records.jsonl.gz
"""
import sys
from collections import defaultdict

import torch

from kevlike.metrics import read_records


def by_key(path):
    out = defaultdict(list)
    for r in read_records(path):
        if r["type"] == "noul" and r.get("half") == "validation":
            out[(r["split"], r["source"], r["question"])].append(r)
    return out


t, b = by_key(sys.argv[1]), by_key(sys.argv[2])
agg = defaultdict(lambda: [0, 0, 0, 0])
for k, rs in t.items():
    if len(b.get(k, ())) != len(rs):
        continue
    for rt, rb in zip(rs, b[k]):
        pooled = torch.tensor(rt["logits"])
        alone = torch.log_softmax(torch.tensor(rb["logits"]), 0)
        twin = 2 * pooled - alone
        for name in (k[0], "all yes/no questions"):
            a = agg[name]
            a[0] += 1
            a[1] += int(alone.argmax() == rt["gold"])
            a[2] += int(twin.argmax() == rt["gold"])
            a[3] += int(pooled.argmax() == rt["gold"])
print("split: n, question alone, twin alone, pooled")
for name, (n, a, tw, p) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
    print(f"{name}: {n}, {a / n:.3f}, {tw / n:.3f}, {p / n:.3f}")
