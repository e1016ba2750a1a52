"""The built-in tasks: the legacy tasks of :mod:`kevlike.data.sources` and the question families of
:mod:`kevlike.data.families`, as rows, examples, evaluation sets and the seeded training mixture
(which also draws from the user's labelled files, :mod:`kevlike.data.labelled`)."""

from __future__ import annotations

import random
from collections import Counter

from kevlike.data.families import SOURCES, balanced_rows, eval_items, family_example, source_rows
from kevlike.data.labelled import read_labelled, to_examples
from kevlike.data.sources import (
    INTENT_SETS, Example, _one_hot, humanize, intent_example, intent_labels, read_intents, read_sentiment, read_spam,
    sentiment_example, spam_example
)
from kevlike.request.render import render_text
from kevlike.request.writing_systems import detect_script

LEGACY_TASKS = ("banking77", "clinc150", "hwu64", "spam", "sentiment")
FAMILY_KEYS = ("max_questions", "distractor", "negation", "augment", "coherence", "wrap_negation", "insert_not",
               "soft_scores", "long")


def _family_sources() -> tuple[str, ...]:
    return tuple(n for n in SOURCES if n not in LEGACY_TASKS)


def is_family(task: str, opts: dict | None = None) -> bool:
    """Whether ``task`` (with its config ``opts``) is built by :mod:`kevlike.data.families`: every source
    but the five legacy tasks, and those with ``families: true``."""
    return task not in LEGACY_TASKS or bool((opts or {}).get("families"))


TASKS = LEGACY_TASKS + _family_sources()
"""Every built-in task: the five legacy tasks and the question-family sources."""


def rows(task: str, split: str) -> tuple:
    """Raw rows of a task's split (see the readers).

    Raises:
        ValueError: unknown task or split.
        DataUnavailableError: its package is not installed.
    """
    if task in INTENT_SETS:
        return read_intents(task, split)
    if task == "spam":
        return read_spam(split)
    if task == "sentiment":
        return read_sentiment(split)
    if task in _family_sources():
        return source_rows(task, split)
    raise ValueError(f"unknown task {task!r} (known: {list(TASKS)})")


def make_example(task: str, row: tuple, rng: random.Random, opts: dict | None = None) -> Example:
    """Build one :class:`Example` from a raw row; ``opts`` are the task's augmentation settings
    (for intents: ``negatives``, ``full_set``, ``perm_twin``, ``irrelevant``, ``noul_twins``)."""
    opts = dict(opts or {})
    opts.pop("weight", None)
    if is_family(task, opts):
        kw = {k: opts[k] for k in (*FAMILY_KEYS, "perm_twin") if k in opts}
        return family_example(task, row, rng, **kw)
    opts.pop("families", None)
    if task in INTENT_SETS:
        return intent_example(task, row[0], row[1], rng, **opts)
    if task == "spam":
        return spam_example(row[0], row[1], rng, **opts)
    if task == "sentiment":
        return sentiment_example(row[0], row[1], rng, **opts)
    raise ValueError(f"unknown task {task!r} (known: {list(TASKS)})")


def eval_examples(task: str, split: str, n: int | None, seed: int = 0, noul_twins: int = 0) -> list[Example]:
    """A fixed, seeded evaluation set: ``n`` rows (all if ``None``) sampled without replacement, each
    asked with the task's first prompt and, for intents, over the *full* label set in sorted order
    (plus up to ``noul_twins`` "is this about X?" questions)."""
    if task not in LEGACY_TASKS:
        return eval_items(task, split, n, seed=seed, wordings="train")
    data = list(rows(task, split))
    rng = random.Random(seed)
    if n is not None and n < len(data):
        data = rng.sample(data, n)
    out = []
    for row in data:
        if task in INTENT_SETS:
            ex = intent_example(task, row[0], row[1], rng, negatives=None, prompt=0, noul_twins=noul_twins)
            labels = [humanize(x) for x in intent_labels(task)]
            ex.request["questions"]["intent"]["criteria"] = {o: None for o in labels}
            ex.targets["intent"] = _one_hot(len(labels), labels.index(humanize(row[1])))
            out.append(ex)
        else:
            out.append(make_example(task, row, rng, {"prompt": 0}))
    return out


def training_scripts(tasks, split: str = "train", min_share: float = 0.01) -> list[str]:
    """Scripts (:func:`kevlike.request.writing_systems.detect_script`) that are the dominant script of at least
    ``min_share`` of the rows of the given tasks' ``split``: what an artifact trained on them declares
    in ``kevlike.json`` (``scripts``), for the out-of-distribution check at serve time."""

    counts, n = Counter(), 0
    for task in tasks:
        for row in rows(task, split):
            text = row[0]
            if isinstance(text, dict) and "questions" in text:   # a typed request (sys1bench): its state
                text = text["state"]
            script = detect_script(render_text(text)).script     # object states as the model reads them
            n += 1
            if script is not None:
                counts[script] += 1
    return sorted(s for s, c in counts.items() if c >= min_share * max(n, 1))


class TaskMixture:
    """Seeded infinite stream of training examples: draw ``i`` picks a task by weight, then a row of it
    uniformly (with replacement), then its augmentations, all from ``Random(f"{seed}:{i}")``. The
    stream is a pure function of ``(seed, i)``, so ``state_dict``/``load_state_dict`` resume it exactly.

    Args:
        tasks: ``{task: {"weight": w, **augmentation}}``.
        split: which split to draw rows from (``train`` for training).
        seed: master seed.
        files: the user's labelled files, ``[{"path": FILE.jsonl, "weight": w}]`` (:mod:`kevlike.data.labelled`):
            each is one more source drawn with weight ``w`` (relative to the tasks'), its lines by their
            own ``weight``; the examples keep the request as written (no augmentation).
    """

    def __init__(self, tasks: dict, split: str = "train", seed: int = 0, files: list | None = None):
        if not tasks and not files:
            raise ValueError("tasks must name at least one task")
        self.tasks = {k: dict(v or {}) for k, v in tasks.items()}
        self.names = sorted(self.tasks)
        self.weights = [float(self.tasks[n].get("weight", 1.0)) for n in self.names]
        self.data = {n: rows(n, split) for n in self.names}
        # the user's labelled files (kevlike.data.labelled): "file:PATH" -> (examples, their line weights)
        self.files = {}
        for entry in files or []:
            items = [it for it in read_labelled(entry["path"]) if it.gold]
            name = f"file:{entry['path']}"
            self.files[name] = (to_examples(items, name), [it.weight for it in items])
            self.names.append(name)
            self.weights.append(float(entry.get("weight", 1.0)))
        for n in self.tasks:
            if not self.data[n]:
                raise ValueError(f"task {n!r} has no rows in split {split!r}")
        self.balanced = {}   # binary family sources: class-balanced sampling
        for n in self.tasks:
            if is_family(n, self.tasks[n]):
                if SOURCES[n].kind == "binary":
                    self.balanced[n] = balanced_rows(n, split)
        self.seed = seed
        self.drawn = 0

    def _example(self, i: int) -> Example:
        rng = random.Random(f"{self.seed}:{i}")
        task = rng.choices(self.names, self.weights)[0]
        if task in self.files:  # a labelled line, by its weight; a copy, so training never edits the file's
            examples, weights = self.files[task]
            ex = rng.choices(examples, weights)[0]
            return Example(dict(ex.request), dict(ex.targets), ex.source, dict(ex.gold))
        data = self.data[task]
        if task in self.balanced:  # draw the label first, then a row of it (class-balanced sampling)
            group = self.balanced[task][rng.random() < 0.5]
            return make_example(task, group[rng.randrange(len(group))], rng, self.tasks[task])
        j = rng.randrange(len(data))
        return make_example(task, data[j], rng, self.tasks[task])

    def take(self, n: int) -> list[Example]:
        out = [self._example(self.drawn + k) for k in range(n)]
        self.drawn += n
        return out

    def state_dict(self) -> dict:
        return {"seed": self.seed, "drawn": self.drawn}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.drawn = int(state["seed"]), int(state["drawn"])


def labelled_lines(task: str, split: str = "test", n: int = 200, seed: int = 0) -> list[dict]:
    """A seeded sample of ``n`` requests of built-in ``task``'s ``split`` as labelled-file lines (the format of
    ``kevlike eval --data`` and ``kevlike calibrate --data``; :mod:`kevlike.data.labelled`):
    ``{"request": <Jev request>, "gold": {question id: answer}}``, the answers written as a user would
    (``true``/``false``, option keys, 0-based level indices). ``kevlike export`` writes them to a file.

    Raises:
        KeyError: an unknown task; ValueError: an unknown split (as :func:`eval_examples`).
    """
    lines = []
    for ex in eval_examples(task, split, n, seed=seed):
        request = {"state": ex.request["state"], "questions": ex.request["questions"]}
        gold = {}
        for qid, q in ex.request["questions"].items():
            key = ex.gold[qid]
            gold[qid] = key == "true" if q["type"] == "noul" else int(key) if q["type"] == "score" else key
        lines.append({"request": request, "gold": gold})
    return lines
