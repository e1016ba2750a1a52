"""Unseen-schema evaluation: ``kevlike eval --suite generalization`` (issue 12).

An in-distribution test split flatters a model that has learnt its training prompts, so every figure
here separates what the model has seen from what it has not:

============================ ===========================================================================
split                        what it asks
============================ ===========================================================================
``seen_wording``             test rows of the training sources, in *training* wordings
``heldout_wording``          the *same items* (same row, options, gold, phrasing direction) in held-out
                             wordings (templates never trained: every fourth of each pool,
                             :func:`kevlike.data.families.template_pool`)
``heldout_source``           whole sources never trained on (:data:`~kevlike.data.families.HELDOUT_SOURCES`),
                             held-out wordings
``bigbench``                 BIG-bench tasks (evaluation-only by their licence terms) asked with their own
                             instructions, if the ``bigbench==1.0.0`` source archive is present
``target/*``                 the issue's named targets: Banking77 over all 77 intents, balanced SMS spam and
                             5-level movie-snippet sentiment, all under held-out wordings
``contrast``                 :file:`kevlike/eval/data/contrast.json`: pairs of short states written for this suite
                             where the same yes/no questions have opposite answers
``contrast_apart``           :file:`kevlike/eval/data/contrast_apart.json`: more such pairs, written after stage 9
                             and kept apart from the ``facts`` training source (no content word of a question
                             in a ``facts`` question, label, subject or topic, no ``facts`` label in a state;
                             tested: a word-level filter, not a semantic guarantee)
``realistic``                :file:`kevlike/eval/data/realistic.json` (:mod:`kevlike.eval.realistic`): texts of 150–600
                             words written for this suite, 4–7 questions each with traps, negated and opposite pairs,
                             numbers and absurd questions; no question or score scale of a generated training source
                             (tested)
``realistic_fresh``          :file:`kevlike/eval/data/realistic_fresh.json`: more such pages, written in stage 45 after
                             every shipped model was chosen, all in the validation half (below)
``realistic_fresh2``         :file:`kevlike/eval/data/realistic_fresh2.json`: a second such batch, written in stage 47
                             after four decisions had read the first; all in the validation half
``realistic_fresh3``         :file:`kevlike/eval/data/realistic_fresh3.json`: a third, written in stage 48 before the
                             candidate designed from R6's errors on the second was scored; all in the validation half
``realistic_fresh4``         :file:`kevlike/eval/data/realistic_fresh4.json`: a fourth, written in stage 50 after stage
                             49's choice read the first three; all in the validation half
``unseen_fresh``             unseen questions no choice has read (stage 48): ``heldout_wording``, ``heldout_source`` and
                             the three ``target/*`` splits built again with item seed 1 (:data:`UNSEEN_FRESH`)
                             instead of 0, less every item whose state those splits ask about; all in the
                             validation half (below)
``unseen_fresh2``            the same drawn with item seed 2 (stage 50, after stage 49's choice read
                             ``unseen_fresh``), less every state the seed 0 and seed 1 draws ask about; all validation
``absurd``                   test rows of the ``absurd`` source (:mod:`kevlike.data.reading`): questions about a property
                             the state lacks, with properties (languages, forms, topics, things) never trained
``documents``                test rows of the ``documents`` source: *seen templates*, new facts and numbers
``snli_test``                the official SNLI 1.0 test premises (a seen task: a sanity figure), if ``kevlike fetch snli``
                             has run
============================ ===========================================================================

**Two halves.** Every item belongs to the *validation* half or the *test* half, by the sha256 of its key
(:func:`half_of`: a contrast pair's id — both its states in one half —, a realistic item's id, else the state
text), so a half is fixed across models and suite versions. The ``realistic_fresh*`` batches and the
``unseen_fresh*`` draws (:data:`VALIDATION_ONLY`) are all validation: the ``realistic`` split's validation pages chose
stages 35–44 and the unseen questions' validation half chose stages 35–47, so a candidate that differs from the
shipped reader is also read on questions no choice has read yet (a batch or draw is fresh until a choice reads it:
stage 49 chose on ``unseen_fresh`` and the first three batches, stage 50 added ``unseen_fresh2`` and
``realistic_fresh4``); they stay outside the unseen figure (:func:`unseen_records`), which keeps one meaning across
stages. Every choice (steps, stages, soups, temperatures, recipes) reads the validation half;
the test half is read only to report. ``metrics.json`` carries ``halves.validation`` and ``halves.test`` (the full
summary of each, with :func:`reading_targets`).

Reported per split: accuracy, NLL, Brier, ECE, confident errors (:mod:`kevlike.metrics`), and

* ``wording_gap`` — accuracy on ``seen_wording`` minus ``heldout_wording`` over the same items;
* ``contrast.both_right`` (and ``contrast_apart.both_right``) — share of (pair, question) answered right on
  *both* states;
* ``coherence.negation`` — share of (state, question) where ``P(yes | Q) + P(yes | not Q)`` is within
  0.05 of 1; ``coherence.noul_vs_choice`` — share where the noul ``P(yes)`` and a two-option choice
  ``{yes, no}`` asked with the same words agree within 0.1.
"""

from __future__ import annotations

import hashlib
import json
import random
import tarfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from kevlike.data.families import HELDOUT_SOURCES, SOURCES, SYNTHETIC_SOURCES, eval_items
from kevlike.data.sources import DataUnavailableError, Example
from kevlike.eval.abstention import abstention_table
from kevlike.eval.realistic import FRESH_FILES, PAIR_TAG, REALISTIC_FILE, realistic_items
from kevlike.metrics import summary
from kevlike.runs import kevlike_home

CONTRAST_FILE = Path(__file__).resolve().parent / "data" / "contrast.json"
CONTRAST_APART_FILE = Path(__file__).resolve().parent / "data" / "contrast_apart.json"
CONTRAST_SPLITS = {"contrast": CONTRAST_FILE, "contrast_apart": CONTRAST_APART_FILE}
BIGBENCH_ARCHIVE = "bigbench-1.0.0.tar.gz"
# task -> instructions (None: the task's own task_prefix) ; all are multiple choice over target_scores
BIGBENCH_TASKS = {
    "vitaminc_fact_verification": ("Based only on the passage, is the claim True, False, or is there not enough "
                                   "information (Neither)?"),
    "formal_fallacies_syllogisms_negation": "Is the argument, given the explicitly stated premises, deductively valid or invalid?",
    "intent_recognition": "Predict the intent of the utterance.",
    "movie_dialog_same_or_different": "Were the two quoted sentences said by the same or by different individuals?",
    "implicatures": "Does Speaker 2's answer mean yes or no?",
    "analytic_entailment": "Does the first sentence entail the second?",
}
SIZES = {"seen": 16, "heldout_source": 60, "bigbench": 40, "target": 100, "absurd": 160, "documents": 100,
         "snli_test": 200, "abstain": 100}
QUICK_SIZES = {"seen": 2, "heldout_source": 4, "bigbench": 4, "target": 6, "absurd": 8, "documents": 4, "snli_test": 6,
               "abstain": 4}
HALVES = ("validation", "test")
# splits that are not unseen questions: trained wordings of trained sources, generated documents from training
# templates, SNLI (a trained task), ``absurd`` (trained wordings about held-out properties) and ``abstain`` (the
# abstention sources' test rows: answerable and "cannot tell" questions on the same states)
NOT_UNSEEN = ("seen_wording", "documents", "snli_test", "absurd", "abstain")
# every split of the suite, in the order it is answered (``bigbench`` and ``snli_test`` only when their data is
# present); ``kevlike eval --splits`` picks among these
SPLITS = ("seen_wording", "heldout_wording", "heldout_source", "bigbench", "target/banking77_all77",
          "target/spam_balanced", "target/sentiment5", *CONTRAST_SPLITS, "realistic", *FRESH_FILES,
          "unseen_fresh", "unseen_fresh2", "absurd", "documents", "snli_test", "abstain")
# the fresh draws of the generated unseen splits: split name → the item seed it draws them with (the suite's own
# splits use 0); each leaves out every state an earlier draw asks about (:func:`unseen_fresh_examples`)
UNSEEN_FRESH = {"unseen_fresh": 1, "unseen_fresh2": 2}
# splits whose every item is in the validation half (:func:`half_for`), kept out of the unseen figure
VALIDATION_ONLY = (*FRESH_FILES, *UNSEEN_FRESH)
# the generated unseen splits the ``unseen_fresh*`` splits draw again (:func:`_build_split`)
UNSEEN_FRESH_OF = ("heldout_wording", "heldout_source", "target/banking77_all77", "target/spam_balanced",
                   "target/sentiment5")
# the source prefixes of the realistic splits' items (:func:`half_key`: a page's id decides its half)
_REALISTIC_SOURCES = tuple(f"{s}/" for s in ("realistic", *FRESH_FILES))


def check_splits(splits, half: str | None = None) -> tuple[str, ...] | None:
    """``splits`` (names of :data:`SPLITS`, or None for all) as a tuple; raises ValueError naming an unknown one,
    or splits that hold nothing of ``half`` (``--splits realistic_fresh --half test``: that split is all
    validation, :data:`VALIDATION_ONLY`)."""
    if splits is None:
        return None
    splits = tuple(dict.fromkeys(splits))            # each once, in the order given
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise ValueError(f"splits: unknown {', '.join(map(repr, unknown))} (known: {', '.join(SPLITS)})")
    if not splits:
        raise ValueError(f"splits: no split named (known: {', '.join(SPLITS)})")
    if half == "test" and set(splits) <= set(VALIDATION_ONLY):
        raise ValueError(f"splits: {', '.join(splits)} {'is' if len(splits) == 1 else 'are'} all in the validation "
                         f"half (questions no choice had read when the shipped models were chosen; "
                         f"docs/guide/evaluation.md): nothing to answer with --half test")
    return splits


def seen_sources() -> list[str]:
    """Every source that is not held out (what the shipped recipe trains on), except kevlike's own
    synthetic ones (:data:`~kevlike.data.families.SYNTHETIC_SOURCES`: the seen splits stay the same items
    from one model to the next; the contrast pairs measure what they teach)."""

    return [n for n in SOURCES if n not in HELDOUT_SOURCES and n not in SYNTHETIC_SOURCES]


def contrast_examples(path: Path = CONTRAST_FILE, split: str = "contrast") -> tuple[list[Example], list[dict]]:
    """One request per state of each contrast pair, asking every question three ways: noul ``Q``
    (``qN``), noul negation ``not Q`` (``nN``) and a two-option choice ``{yes, no}`` with Q's words (``cN``).

    Returns ``(examples, pairs)``; targets are the true answers (for ``cN``: ``yes`` iff Q is true); each
    example's source is ``SPLIT/ID/S`` (``split``, the pair's id, the state's index).

    Raises:
        ValueError: a malformed pair (fewer than 2 states, a question without ``q``/``neg``/``a``).
    """
    data = json.loads(Path(path).read_text())
    out = []
    for pair in data["pairs"]:
        if len(pair["states"]) != 2 or not pair["questions"]:
            raise ValueError(f"contrast pair {pair.get('id')!r}: needs 2 states and at least one question")
        for s, state in enumerate(pair["states"]):
            qs, targets, gold = {}, {}, {}
            for i, q in enumerate(pair["questions"]):
                truth = bool(q["a"]) if s == 0 else not bool(q["a"])
                yes, no = [1.0, 0.0], [0.0, 1.0]
                qs[f"q{i}"] = {"type": "noul", "instructions": q["q"]}
                targets[f"q{i}"] = yes if truth else no
                qs[f"n{i}"] = {"type": "noul", "instructions": q["neg"]}
                targets[f"n{i}"] = no if truth else yes
                qs[f"c{i}"] = {"type": "choice", "instructions": q["q"], "criteria": {"yes": None, "no": None}}
                targets[f"c{i}"] = yes if truth else no
                gold.update({f"q{i}": str(truth).lower(), f"n{i}": str(not truth).lower(), f"c{i}": "yes" if truth else "no"})
            out.append(Example({"state": state, "questions": qs}, targets, f"{split}/{pair['id']}/{s}", gold))
    return out, data["pairs"]


def contrast_pairs() -> dict[str, list[dict]]:
    """``{split: pairs}`` of every contrast file (:data:`CONTRAST_SPLITS`)."""
    return {split: json.loads(path.read_text())["pairs"] for split, path in CONTRAST_SPLITS.items()}


def _p_yes(r: dict) -> float:
    """P(yes) of a yes/no record (``probs[0]``: P(true) for noul, P(yes) for a ``{yes, no}`` choice)."""
    return r["probs"][0]


def contrast_metrics(records: list[dict], pairs: list[dict], split: str = "contrast",
                     p_yes: Callable[[dict], float] | None = None) -> dict:
    """``both_right`` (share of pair questions right on both states, noul form), ``noul_accuracy`` and the
    two coherence shares of the module docstring, from the records of :func:`contrast_examples`.

    Records must carry ``source`` ``SPLIT/ID/S`` (``split``) and ``question`` ids ``qN``/``nN``/``cN``.
    ``p_yes(record)`` is a record's P(yes) (a probability, not a logit); by default ``probs[0]``, which is
    P(true) for noul and P(yes) for the choice (options in request order). Unless every pair question has
    its ``cN`` records, ``noul_vs_choice`` is None.

    Raises:
        KeyError: a ``qN`` or ``nN`` record of a pair question is missing."""
    p_yes = p_yes or _p_yes
    by = {(r["source"], r["question"]): r for r in records if r["source"].startswith(f"{split}/")}
    both, n_q, neg_ok, choice_ok, n_choice, n_state_q, right = 0, 0, 0, 0, 0, 0, 0
    for pair in pairs:
        for i in range(len(pair["questions"])):
            oks = []
            for s in (0, 1):
                src = f"{split}/{pair['id']}/{s}"
                q, n, c = by[(src, f"q{i}")], by[(src, f"n{i}")], by.get((src, f"c{i}"))
                pq = p_yes(q)
                ok = (pq > 0.5) == (q["gold"] == 0)
                oks.append(ok)
                right += ok
                n_state_q += 1
                neg_ok += abs(pq + p_yes(n) - 1.0) <= 0.05
                if c is not None:
                    choice_ok += abs(pq - p_yes(c)) <= 0.1
                    n_choice += 1
            both += all(oks)
            n_q += 1
    return {"pairs": len(pairs), "questions": n_q, "both_right": both / max(n_q, 1),
            "noul_accuracy": right / max(n_state_q, 1),
            "coherence": {"n": n_state_q, "negation": neg_ok / max(n_state_q, 1),
                          "noul_vs_choice": choice_ok / n_choice if n_choice == n_state_q and n_choice else None}}


def realistic_examples(path: Path = REALISTIC_FILE, split: str = "realistic") -> list[Example]:
    """One request per item of the realistic file at ``path``, all its questions; source ``SPLIT/ID``; targets
    one-hot on the gold (noul options ``[true, false]``, score levels in order)."""
    out = []
    for item in realistic_items(path):
        qs, targets, gold = {}, {}, {}
        for qid, q in item["questions"].items():
            qs[qid] = {k: q[k] for k in ("type", "instructions", "criteria") if k in q}
            if q["type"] == "noul":
                targets[qid] = [1.0, 0.0] if q["gold"] == "true" else [0.0, 1.0]
            elif q["type"] == "choice":
                targets[qid] = [1.0 if k == q["gold"] else 0.0 for k in q["criteria"]]
            else:
                targets[qid] = [1.0 if i == q["gold"] else 0.0 for i in range(len(q["criteria"]))]
            gold[qid] = str(q["gold"])
        out.append(Example({"state": item["state"], "questions": qs}, targets, f"{split}/{item['id']}", gold))
    return out


@lru_cache(maxsize=4)
def realistic_tags(path: Path = REALISTIC_FILE, split: str = "realistic") -> dict[tuple[str, str], tuple[str, ...]]:
    """``{(source, question id): tags}`` of the realistic file at ``path`` read as ``split`` (source as in
    :func:`realistic_examples`); read once per path (every summary of a run, each half and the uncalibrated one,
    asks for it)."""
    return {(f"{split}/{it['id']}", qid): tuple(q.get("tags", []))
            for it in realistic_items(path) for qid, q in it["questions"].items()}


def _state(example: Example) -> str:
    """The state of ``example`` as canonical JSON: what decides a generated item's half and what ``unseen_fresh``
    leaves out."""
    return json.dumps(example.request["state"], sort_keys=True, ensure_ascii=False)


def half_key(split: str, example: Example) -> str:
    """What decides an item's half: a contrast pair's ``SPLIT/ID`` (both states together), a realistic item's
    source, else the state (canonical JSON of it)."""
    if split in CONTRAST_SPLITS:
        return example.source.rsplit("/", 1)[0]
    if example.source.startswith(_REALISTIC_SOURCES):
        return example.source
    return _state(example)


def half_of(key: str) -> str:
    """``"validation"`` or ``"test"``: the parity of ``sha256("half:" + key)``."""
    return HALVES[int(hashlib.sha256(f"half:{key}".encode("utf-8")).hexdigest(), 16) % 2]


def half_for(split: str, example: Example) -> str:
    """The half of ``example`` in ``split``: ``"validation"`` for a :data:`VALIDATION_ONLY` split, else
    :func:`half_of` its :func:`half_key`."""
    return "validation" if split in VALIDATION_ONLY else half_of(half_key(split, example))


def with_halves(split: str, examples: list[Example], records: list[dict]) -> list[dict]:
    """``records`` (one per question, in the order of ``examples`` and their questions, as
    :func:`kevlike.metrics.records_from_logits` returns them) each with ``half`` set.

    Raises:
        ValueError: the records do not line up with the examples' questions."""
    out, i = [], 0
    for ex in examples:
        h = half_for(split, ex)
        for qid in ex.request["questions"]:
            if i >= len(records) or records[i]["question"] != qid:
                raise ValueError(f"{split}: record {i} does not match question {qid!r} of {ex.source}")
            out.append({**records[i], "half": h})
            i += 1
    if i != len(records):
        raise ValueError(f"{split}: {len(records) - i} records more than questions")
    return out


def bigbench_dir() -> Path:

    return kevlike_home() / "bigbench"


def bigbench_tasks(archive: str | Path | None = None) -> dict[str, dict]:
    """The task.json of each of :data:`BIGBENCH_TASKS`, extracted once from BIG-bench's source archive
    (``pip download --no-deps bigbench==1.0.0``, 358 MB) into ``$KEVLIKE_HOME/bigbench/``. Returns ``{}``
    when neither the extracted files nor the archive (``archive`` or ``$KEVLIKE_HOME/bigbench-1.0.0.tar.gz``)
    exist. BIG-bench asks that its data never be trained on: it is read here and nowhere else."""

    cache = bigbench_dir()
    missing = [t for t in BIGBENCH_TASKS if not (cache / f"{t}.json").is_file()]
    if missing:
        src = Path(archive) if archive else kevlike_home() / BIGBENCH_ARCHIVE
        if not src.is_file():
            return {}
        cache.mkdir(parents=True, exist_ok=True)
        wanted = {f"bigbench-1.0.0/bigbench/benchmark_tasks/{t}/task.json": t for t in missing}
        with tarfile.open(src, "r:gz") as tar:
            for m in tar:
                if m.name in wanted:
                    (cache / f"{wanted[m.name]}.json").write_bytes(tar.extractfile(m).read())
    return {t: json.loads((cache / f"{t}.json").read_text()) for t in BIGBENCH_TASKS if (cache / f"{t}.json").is_file()}


def bigbench_examples(tasks: dict[str, dict], n: int, seed: int = 0) -> list[Example]:
    """``n`` seeded examples per BIG-bench task: state = the example's input, one choice question over its
    ``target_scores`` keys (gold: the highest score) with :data:`BIGBENCH_TASKS`' instructions."""
    out = []
    for name, task in tasks.items():
        exs = [e for e in task["examples"] if isinstance(e.get("target_scores"), dict) and len(e["target_scores"]) >= 2]
        rng = random.Random(f"{seed}:{name}")
        for e in rng.sample(exs, min(n, len(exs))):
            keys = list(e["target_scores"])
            gi = max(range(len(keys)), key=lambda k: e["target_scores"][keys[k]])
            q = {"type": "choice", "instructions": BIGBENCH_TASKS[name], "criteria": {k: None for k in keys}}
            out.append(Example({"state": e["input"].strip(), "questions": {"q": q}},
                               {"q": [1.0 if k == gi else 0.0 for k in range(len(keys))]}, f"{name}", {"q": keys[gi]}))
    return out


def generalization_sets(quick: bool = False, n: int | None = None, bigbench: str | Path | None = None,
                        splits: tuple[str, ...] | None = None) -> dict:
    """``{split: [Example]}`` of the module docstring (``n`` overrides every per-source size); ``splits``: only
    these (names of :data:`SPLITS`; the others are not built). Raises ValueError for an unknown split name."""

    only = check_splits(splits)
    sets = {s: _build_split(s, quick, n, bigbench) for s in (only or SPLITS)}
    return {s: exs for s, exs in sets.items() if exs is not None}


ABSENT_WHY = {
    "bigbench": f"BIG-bench's source archive is not in $KEVLIKE_HOME ({BIGBENCH_ARCHIVE}: pip download --no-deps "
                f"bigbench==1.0.0 -d $KEVLIKE_HOME, where the package index has it)",
    "snli_test": "SNLI is not fetched (kevlike fetch snli)",
}
"""Why a split whose data is absent is left out of a run (:func:`absent_splits`)."""


def absent_splits(sets: dict, splits: tuple[str, ...] | None = None) -> dict[str, str]:
    """``{split: why}`` for each split of ``splits`` (default: all of :data:`SPLITS`) that
    :func:`generalization_sets` left out because its data is absent: a run without them is not comparable
    with one that has them, so the evaluation says so instead of dropping them silently."""
    return {s: ABSENT_WHY.get(s, "its data is not installed") for s in (splits or SPLITS) if s not in sets}


def _unseen_split(split: str, size: dict, seed: int = 0) -> list[Example]:
    """The examples of one generated unseen split (:data:`UNSEEN_FRESH_OF`) drawn with item seed ``seed``
    (:func:`kevlike.data.families.eval_items`): 0 for the split itself, an :data:`UNSEEN_FRESH` seed for a
    fresh draw."""
    if split == "heldout_wording":      # sys1bench requests carry their own wording
        return [e for name in seen_sources() if not name.startswith("sys1_")
                for e in eval_items(name, "test", size["seen"], seed, wordings="heldout")]
    if split == "heldout_source":
        return [e for name in HELDOUT_SOURCES
                for e in eval_items(name, "test", size["heldout_source"], seed, wordings="heldout")]
    if split == "target/banking77_all77":
        return eval_items("banking77", "test", 6 * size["target"], seed, wordings="heldout", families=("choice",))
    if split == "target/spam_balanced":
        return eval_items("spam", "test", 2 * size["target"], seed, wordings="heldout")
    if split == "target/sentiment5":
        return eval_items("vader_movie", "test", 2 * size["target"], seed, wordings="heldout", families=("score",))
    raise ValueError(f"split: {split!r} is not a generated unseen split (known: {', '.join(UNSEEN_FRESH_OF)})")


def unseen_fresh_examples(size: dict, name: str = "unseen_fresh") -> list[Example]:
    """The fresh draw ``name`` of :data:`UNSEEN_FRESH`: each split of :data:`UNSEEN_FRESH_OF` drawn with that
    name's item seed — the same sources, families and held-out wordings as the unseen figure's generated splits, on
    items no choice has read — less the states earlier draws ask about. ``unseen_fresh`` (seed 1, stage 48) leaves
    out the states its own split asks about at seed 0; a later draw leaves out every state any of the five splits
    asks about at any lower seed (``unseen_fresh`` holds 12 states another split asks at seed 0). ``size`` as
    :data:`SIZES`. Raises ValueError for a name not in :data:`UNSEEN_FRESH`."""
    if name not in UNSEEN_FRESH:
        raise ValueError(f"split: {name!r} is not a fresh unseen draw (known: {', '.join(UNSEEN_FRESH)})")
    seed = UNSEEN_FRESH[name]
    if name == "unseen_fresh":      # stage 48's definition, kept so that its recorded figures keep their meaning
        asked = {split: {_state(e) for e in _unseen_split(split, size)} for split in UNSEEN_FRESH_OF}
    else:
        every = {_state(e) for split in UNSEEN_FRESH_OF for s in range(seed) for e in _unseen_split(split, size, s)}
        asked = dict.fromkeys(UNSEEN_FRESH_OF, every)
    return [e for split in UNSEEN_FRESH_OF for e in _unseen_split(split, size, seed) if _state(e) not in asked[split]]


def _build_split(split: str, quick: bool, n: int | None, bigbench) -> list[Example] | None:
    """One split's examples (:func:`generalization_sets`); None where its data is absent (BIG-bench's archive,
    SNLI not fetched)."""
    size = dict(QUICK_SIZES if quick else SIZES)
    if n is not None:
        size = {k: n for k in size}
    if split == "seen_wording":
        return [e for name in seen_sources() for e in eval_items(name, "test", size["seen"], wordings="train")]
    if split in UNSEEN_FRESH_OF:
        return _unseen_split(split, size)
    if split in UNSEEN_FRESH:
        return unseen_fresh_examples(size, split)
    if split == "bigbench":
        tasks = bigbench_tasks(bigbench)
        return bigbench_examples(tasks, size["bigbench"]) if tasks else None
    # the hand-written splits are whole unless ``n`` is given: then their first ``n`` pages (or contrast pairs,
    # both states of each)
    if split in CONTRAST_SPLITS:
        examples = contrast_examples(CONTRAST_SPLITS[split], split)[0]
        return examples if n is None else examples[:2 * n]
    if split == "realistic":
        return realistic_examples()[:n]
    if split in FRESH_FILES:
        return realistic_examples(FRESH_FILES[split], split)[:n]
    if split in ("absurd", "documents"):
        return eval_items(split, "test", size[split])
    if split == "snli_test":
        try:
            return eval_items("snli", "test", size["snli_test"])
        except DataUnavailableError:      # `kevlike fetch snli` has not run: the sanity split is left out
            return None
    # "abstain", x_abstain's held-out split (issue 33): generated documents and SNLI test premises, each request
    # asking questions the state answers beside ones it does not ("cannot_tell"); a model without x_abstain is
    # scored on the answerable ones only
    out = eval_items("abstain_docs", "test", size["abstain"])
    try:
        out += eval_items("abstain_snli", "test", size["abstain"])
    except DataUnavailableError:
        pass
    return out


def counted(record: dict) -> bool:
    """Whether a record counts in its split's figures: every record but the negated (``nN``) and choice
    (``cN``) forms of the contrast splits, which feed only the coherence checks (:func:`contrast_metrics`)."""
    return record["split"] not in CONTRAST_SPLITS or record["question"].startswith("q")


def generalization_summary(records: list[dict], pairs: dict[str, list[dict]], halves: bool = True) -> dict:
    """Per split (and per source within a split) metrics, the wording gap, the contrast figures of each
    contrast split present (``pairs``: :func:`contrast_pairs`) and :func:`reading_targets`; with ``halves``
    and records that carry ``half``, the same for each half under ``halves``."""
    if halves and records and all("half" in r for r in records):
        out = generalization_summary(records, pairs, halves=False)
        out["halves"] = {}
        for h in HALVES:
            if not any(r["half"] == h for r in records):   # a `--half` run: the other half is not answered
                continue
            keep = {(split, p["id"]) for split, ps in pairs.items() for p in ps if half_of(f"{split}/{p['id']}") == h}
            sub_pairs = {split: [p for p in ps if (split, p["id"]) in keep] for split, ps in pairs.items()}
            out["halves"][h] = generalization_summary([r for r in records if r["half"] == h], sub_pairs, halves=False)
        return out

    out = {"splits": {}, "per_source": {}}
    for split in sorted({r["split"] for r in records}):
        recs = [r for r in records if r["split"] == split and counted(r)]
        out["splits"][split] = summary(recs)
        by_type = {}
        for t in sorted({r["type"] for r in recs}):
            by_type[t] = summary([r for r in recs if r["type"] == t])
        out["splits"][split]["per_type"] = by_type
        for src in sorted({r["source"] for r in recs}):
            if split not in CONTRAST_SPLITS:
                out["per_source"][f"{split}:{src}"] = summary([r for r in recs if r["source"] == src])
    s, h = out["splits"].get("seen_wording"), out["splits"].get("heldout_wording")
    if s and h:
        seen_same = [r for r in records if r["split"] == "seen_wording" and not r["source"].startswith("sys1_")]
        out["wording_gap"] = summary(seen_same)["accuracy"] - h["accuracy"]
    for split in CONTRAST_SPLITS:
        recs = [r for r in records if r["split"] == split]
        if recs:   # the pairs answered (a run of one half answers that half's pairs)
            asked = {r["source"].split("/")[1] for r in recs}
            out[split] = contrast_metrics(recs, [p for p in pairs[split] if p["id"] in asked], split)
    out["targets"] = reading_targets(records, out)
    return out


def coherence_pairs(records: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of yes/no records whose answers must be opposite: each contrast question and its negation on one
    state (``qN``/``nN``), and the realistic split's ``negation_pair`` / ``opposite_pair`` tags."""
    out = []
    by = {(r["split"], r["source"], r["question"]): r for r in records}
    for (split, src, q), r in by.items():
        if split in CONTRAST_SPLITS and q.startswith("q") and (split, src, "n" + q[1:]) in by:
            out.append((r, by[(split, src, "n" + q[1:])]))
    if any(r["split"] == "realistic" for r in records):
        out += realistic_pairs(records)
    return out


def realistic_pairs(records: list[dict], path: Path = REALISTIC_FILE,
                    split: str = "realistic") -> list[tuple[dict, dict]]:
    """The record pairs of ``split``'s ``negation_pair`` / ``opposite_pair`` tags (the realistic file at ``path``),
    where both questions of a pair were answered."""
    tags = realistic_tags(path, split)
    groups: dict = {}
    for r in records:
        if r["split"] == split:
            for t in tags.get((r["source"], r["question"]), ()):
                if PAIR_TAG.match(t):
                    groups.setdefault((r["source"], t), []).append(r)
    return [tuple(g) for g in groups.values() if len(g) == 2]


def realistic_tag_figures(records: list[dict], path: Path = REALISTIC_FILE, split: str = "realistic") -> dict:
    """The tag figures of one realistic split's records (the file at ``path``): ``pairs`` (how many negation /
    opposite pairs were answered whole) with their :func:`pair_coherence`, and ``absurd`` (how many ``absurd``-tagged
    questions) with ``absurd_p_yes_below_0.2``, the share of them with P(yes) < 0.2 (None for none)."""
    tags = realistic_tags(path, split)
    pairs = realistic_pairs(records, path, split)
    absurd = [r for r in records if r["split"] == split and "absurd" in tags.get((r["source"], r["question"]), ())]
    return {"pairs": len(pairs), **pair_coherence(pairs), "absurd": len(absurd),
            "absurd_p_yes_below_0.2": sum(_p_yes(r) < 0.2 for r in absurd) / len(absurd) if absurd else None}


def pair_coherence(pairs: list[tuple[dict, dict]]) -> dict[str, float | None]:
    """Issue 31's two coherence figures over yes/no record pairs whose answers must be opposite: the share with
    |P(yes | Q) + P(yes | Q') − 1| ≤ 0.1 (``sum_within_0.1``) and the share not both above 0.5
    (``not_both_yes``); None for no pairs."""
    if not pairs:
        return {"sum_within_0.1": None, "not_both_yes": None}
    return {"sum_within_0.1": sum(abs(_p_yes(a) + _p_yes(b) - 1) <= 0.1 for a, b in pairs) / len(pairs),
            "not_both_yes": sum(not (_p_yes(a) > 0.5 and _p_yes(b) > 0.5) for a, b in pairs) / len(pairs)}


def unseen_records(records: list[dict]) -> list[dict]:
    """The unseen questions of a run: every counted record (:func:`counted`) outside :data:`NOT_UNSEEN` and
    :data:`VALIDATION_ONLY`."""
    return [r for r in records if r["split"] not in NOT_UNSEEN + VALIDATION_ONLY and counted(r)]


def reading_targets(records: list[dict], summ: dict) -> dict:
    """Issue 31's targets on ``records`` (one half, normally the test half), each ``{"value", "target", "n",
    "met"}`` (``met`` None where there is nothing to measure): realistic accuracy ≥ 0.80; absurd questions with
    P(yes) < 0.2 on ≥ 95 % (the ``absurd`` split's no-questions and the realistic ``absurd`` tags); negation
    coherence |P(yes|Q) + P(yes|not Q) − 1| ≤ 0.1 on ≥ 80 % of pairs and never both above 0.5 on ≥ 90 %
    (:func:`coherence_pairs`); score on held-out sources ≥ 0.65; 5-level sentiment ≥ 0.55; yes/no on held-out
    sources ≥ 0.80 at ECE ≤ 0.05; ``contrast_apart`` right on both states ≥ 0.75; SNLI test accuracy (no
    target); unseen questions (:func:`unseen_records`: accuracy and NLL, reported, compared between runs by
    ``kevlike compare RUN --baseline BASE``, :mod:`kevlike.eval.unseen`)."""

    def t(value, target, n, ok=None):
        met = None if value is None or target is None else (ok if ok is not None else value >= target)
        return {"value": value, "target": target, "n": n, "met": met}

    out = {}
    real = [r for r in records if r["split"] == "realistic"]
    out["realistic_accuracy"] = t(summary(real)["accuracy"] if real else None, 0.80, len(real))
    tags = realistic_tags() if real else {}
    absurd = [r for r in records if r["split"] == "absurd" and r["type"] == "noul" and r["gold"] == 1]
    absurd += [r for r in real if "absurd" in tags.get((r["source"], r["question"]), [])]
    out["absurd_p_yes_below_0.2"] = t(sum(_p_yes(r) < 0.2 for r in absurd) / len(absurd) if absurd else None,
                                      0.95, len(absurd))
    pairs = coherence_pairs(records)
    coherence = pair_coherence(pairs)
    out["negation_sum_within_0.1"] = t(coherence["sum_within_0.1"], 0.80, len(pairs))
    out["opposites_not_both_yes"] = t(coherence["not_both_yes"], 0.90, len(pairs))
    ho = [r for r in records if r["split"] == "heldout_source"]
    sc = [r for r in ho if r["type"] == "score"]
    out["heldout_source_score_accuracy"] = t(summary(sc)["accuracy"] if sc else None, 0.65, len(sc))
    s5 = [r for r in records if r["split"] == "target/sentiment5"]
    out["sentiment5_accuracy"] = t(summary(s5)["accuracy"] if s5 else None, 0.55, len(s5))
    yn = [r for r in ho if r["type"] == "noul"]
    if yn:
        s = summary(yn)
        out["heldout_source_noul_accuracy"] = t(s["accuracy"], 0.80, len(yn))
        out["heldout_source_noul_ece"] = t(s["ece"], 0.05, len(yn), ok=s["ece"] <= 0.05)
    if "contrast_apart" in summ:
        c = summ["contrast_apart"]
        out["contrast_apart_both_right"] = t(c["both_right"], 0.75, c["questions"])
    nli = [r for r in records if r["split"] == "snli_test"]
    out["snli_test_accuracy"] = t(summary(nli)["accuracy"] if nli else None, None, len(nli))
    u = unseen_records(records)
    su = summary(u) if u else None
    out["unseen_accuracy"] = t(su and su["accuracy"], None, len(u))
    out["unseen_nll"] = t(su and su["nll"], None, len(u))
    return out


def targets_table(targets: dict) -> str:
    """Markdown: one row per target of :func:`reading_targets`."""
    lines = ["| target | n | value | goal | met |", "|---|---|---|---|---|"]
    for name, x in targets.items():
        v = "—" if x["value"] is None else f"{x['value']:.3f}"
        goal = "—" if x["target"] is None else (f"≤ {x['target']}" if name.endswith("_ece") else f"≥ {x['target']}")
        met = "—" if x["met"] is None else ("yes" if x["met"] else "**no**")
        lines.append(f"| {name} | {x['n']} | {v} | {goal} | {met} |")
    return "\n".join(lines)


def _split_table(summ: dict) -> str:
    lines = ["| split | n | accuracy | NLL | ECE | confident errors | noul acc | choice acc | score acc |",
             "|---|---|---|---|---|---|---|---|---|"]
    for split, s in summ["splits"].items():
        if not s["n"]:   # only "cannot tell" questions: nothing answerable to score (the abstention table has them)
            continue
        pt = s.get("per_type", {})
        cells = [f"{s['n']}", f"{s['accuracy']:.3f}", f"{s['nll']:.3f}", f"{s['ece']:.3f}", f"{s['confident_error']:.3f}"]
        cells += [f"{pt[t]['accuracy']:.3f} ({pt[t]['n']})" if pt.get(t, {}).get("n") else ""
                  for t in ("noul", "choice", "score")]
        lines.append(f"| {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


ABSTENTION_HEADING = "Abstention (x_abstain; answer when x_abstain < t; docs/guide/abstention.md):"
UNCALIBRATED_ABSTENTION_HEADING = ("Abstention at T = 1 (x_abstain without its Platt scaling: not what the server "
                                   "returns; the calibrated table is above):")


def report_tables(summ: dict, abstention_heading: str = ABSTENTION_HEADING) -> str:
    """Markdown: the halves (each: its split table and targets) when the summary has them, then the whole run:
    one row per split (with per-type accuracies), the wording gap, the contrast figures. ``abstention_heading``
    titles the abstention table (:data:`UNCALIBRATED_ABSTENTION_HEADING` for the T = 1 rescoring)."""
    if "halves" in summ:
        md = ""
        for h in HALVES:
            sub = summ["halves"].get(h)
            if sub is None:          # a `--half` run: the other half has no records, so no table
                continue
            md += (f"## {h.capitalize()} half" + (" (every choice reads this half)" if h == "validation" else
                                                  " (report only: no choice reads it)") + "\n\n")
            md += _split_table(sub) + "\n\nTargets (issue 31):\n\n" + targets_table(sub["targets"]) + "\n\n"
        rest = {k: v for k, v in summ.items() if k != "halves"}
        return md + "## Both halves\n\n" + report_tables(rest, abstention_heading)
    md = _split_table(summ)
    if abst := abstention_table(summ, group="splits"):
        md += f"\n\n{abstention_heading}\n\n" + abst
    if "wording_gap" in summ:
        md += f"\n\nWording gap (seen − held-out wording, same items): {summ['wording_gap']:+.3f}"
    for split in (x for x in CONTRAST_SPLITS if x in summ):
        c = summ[split]
        name = "Contrast pairs" if split == "contrast" else f"Contrast pairs apart from training ({split})"
        vs_choice = c["coherence"]["noul_vs_choice"]
        md += (f"\n\n{name}: {c['pairs']} pairs, {c['questions']} questions; right on both states "
               f"{c['both_right']:.3f}; noul accuracy {c['noul_accuracy']:.3f}. Coherence over {c['coherence']['n']} "
               f"(state, question): P(yes|Q) + P(yes|not Q) within 0.05 of 1: {c['coherence']['negation']:.3f}; "
               + (f"noul vs two-option choice within 0.1: {vs_choice:.3f}." if vs_choice is not None
                  else "noul vs two-option choice: not asked."))
    md += "\n\n| split:source | n | accuracy | NLL | ECE |\n|---|---|---|---|---|\n"
    md += "\n".join(f"| {k} | {v['n']} | {v['accuracy']:.3f} | {v['nll']:.3f} | {v['ece']:.3f} |"
                    for k, v in summ["per_source"].items() if v["n"])
    return md
