"""``ts_*``: typed requests from the procedural generators of the ``tasksource`` package (issue 31 item 1).

``tasksource==0.1.1`` ships, in ``tasksource/jev/procedural/``, 18 generators that need only the standard
library: ``generate(rng, level)`` returns one state (a string or a JSON object) and several typed questions
over it whose answers follow from the rules the state itself states (order totals, ledgers, schedules,
needle lookups through reissued ids, policy precedence, belief tracking, graph paths, …), at difficulty
levels 0–4. The package's ``__init__`` imports ``datasets`` (not a kevlike dependency), so the package is
found with :func:`importlib.util.find_spec` and never imported: the generator modules are loaded by file
path under a private parent package of our own (:data:`_PKG`), which resolves their relative imports
(``from ._common import …``, ``from .policy_applicability import …``).

Rows are ``(request, gold)`` like the other typed sources (``kevlike.data.families._sys1``,
:func:`kevlike.data.facts.rows`):

* the state is a string; a JSON-object state is written as the canonical JSON kevlike reads when that object is
  sent (:func:`kevlike.request.render.render_text`: sorted keys, compact separators), so the model trains on
  the text it serves. Nothing is cut: a row whose state is over :data:`MAX_STATE_CHARS` characters is
  dropped (long needle lists and eligibility tables at levels 3–4);
* ``noul`` criteria ``None``, gold ``"true"``/``"false"``; ``choice`` criteria ``{key: description or None}``
  (``None`` where the generator's description repeats the key), gold a key; ``score`` criteria the level
  descriptions lowest first, gold ``str(level index)``.

A question is kept only when its answer is an exact label among its options: a ``noul`` answer of exactly 0
or 1, a ``choice`` answer with all its probability on one offered key, an integral ``score`` level. The
generators' own "none" options ("none", "none (default deny)", "unknown") are offered options and stay. Left
out, never re-labelled:

* :data:`PROBABILITY_QUESTIONS` — questions that ask for a probability ("what is the chance that…", "how
  likely…"): their answer is a number in [0, 1], not a yes/no, even where it happens to be 0 or 1;
* a ``choice`` whose answer is a posterior distribution over the options (``policy_under_uncertainty``'s
  ``requester_role`` always, its ``governing_policy`` when the role decides it);
* a question with fewer than 2 or more than 255 options (or a score outside 2–10 levels) — none occur in
  0.1.1, checked anyway.

A state with no question left is skipped. :data:`SKIPPED` names the generators that give no valid item:
``partial_observation_calibration`` asks only for an exact posterior probability.

Seeds are our own: item ``i`` of a split is drawn by ``random.Random("kevlike-ts:SEED:GENERATOR:i")`` at
level ``i % 5``, seeds train 11, validation 12, test 13. The wheel documents no seed of its own; the
upstream build script (not shipped) seeds row ``i`` of its published splits by ``"TASK:SPLIT:i"``, a string
none of ours equals. Splits are disjoint by state: test is drawn first, validation skips test's states,
train skips both (and each split skips its own repeats). Sizes per generator: train 2,000, validation 40,
test 150 (fewer only if :data:`MAX_ATTEMPTS` draws per row run out, which 0.1.1 never does).
"""

from __future__ import annotations

import importlib.util
import random
import sys
import types
from functools import lru_cache
from pathlib import Path

from kevlike.data.sources import DataUnavailableError
from kevlike.request.render import render_text

PACKAGE = "tasksource"
VERSION = "0.1.1"
PIP = f"pip install --no-deps {PACKAGE}=={VERSION}"
_PKG = "_kevlike_tasksource_procedural"   # private parent package the generator modules are loaded under

GENERATORS = (
    "arithmetic", "entity_belief_tracking", "event_state_reconstruction", "event_triggered_execution",
    "evidence_sufficiency", "goal_directed_planning", "graph_navigation", "instruction_execution",
    "multi_view_adjudication", "needle_retrieval", "policy_applicability", "policy_under_uncertainty",
    "record_aggregation", "record_eligibility", "state_perturbation", "table_lookup", "taxonomy_routing",
)
SKIPPED = {
    "partial_observation_calibration": "its one question asks for the exact posterior probability that an incident "
                                       "is real (a fraction in (0, 1)), never a yes/no or an option",
}
PROBABILITY_QUESTIONS = {
    "arithmetic": ("random_line_bulk", "random_is_deposit", "random_is_long"),   # "what is the probability that…"
    "partial_observation_calibration": ("incident_real",),                      # "what is the posterior probability…"
    "policy_under_uncertainty": ("access_allowed",),                            # "how likely is the request…"
}
SPLIT_SEEDS = {"train": 11, "validation": 12, "test": 13}
SPLIT_SIZES = {"train": 2000, "validation": 40, "test": 150}
SPLIT_ORDER = ("test", "validation", "train")   # each split skips the states of the splits before it
LEVELS = 5
MAX_STATE_CHARS = 6000
MAX_ATTEMPTS = 50                                # draws per row before a split gives up


def package_root() -> Path:
    """``tasksource/jev/procedural`` of the installed package, found without importing it.

    Raises:
        DataUnavailableError: not installed (the message names the exact pip command).
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DataUnavailableError(f"the {PACKAGE} data package is not installed; run: {PIP}")
    root = Path(list(spec.submodule_search_locations)[0]) / "jev" / "procedural"
    if not (root / "_common.py").is_file():
        raise DataUnavailableError(f"the installed {PACKAGE} has no jev/procedural generators; run: {PIP}")
    return root


def module(generator: str) -> types.ModuleType:
    """The generator module ``tasksource/jev/procedural/GENERATOR.py``, loaded by path (never through the
    package's ``__init__``); its relative imports resolve inside :data:`_PKG`."""
    root = package_root()
    if _PKG not in sys.modules:
        parent = types.ModuleType(_PKG)
        parent.__path__ = [str(root)]      # the import system finds _common, policy_applicability, … here
        parent.__package__ = _PKG
        sys.modules[_PKG] = parent
    name = f"{_PKG}.{generator}"
    if name not in sys.modules:
        path = root / f"{generator}.py"
        if not path.is_file():
            raise ValueError(f"no tasksource procedural generator {generator!r}")
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def state_text(state) -> str:
    """A string state as it is; an object state as the canonical JSON kevlike reads when it is sent."""
    return state if isinstance(state, str) else render_text(state)


def convert(generator: str, problem) -> tuple[dict, dict] | None:
    """``(request, gold)`` of one generated problem, with only the questions whose answer is an exact label
    among their options (module docstring); ``None`` when none is left or the state is too long."""
    state = state_text(problem.state)
    if len(state) > MAX_STATE_CHARS:
        return None
    skip = PROBABILITY_QUESTIONS.get(generator, ())
    questions, gold = {}, {}
    for qid, spec in problem.questions.items():
        answer = problem.answers[qid]
        kind = spec["type"]
        if qid in skip or answer.get("type", kind) != kind:
            continue
        if kind == "noul":
            if answer["noul"] not in (0.0, 1.0):
                continue
            crit, g = None, "true" if answer["noul"] == 1.0 else "false"
        elif kind == "choice":
            opts = spec["criteria"]
            g = answer["choice"]
            probs = answer.get("probabilities", {g: 1.0})
            if g not in opts or probs.get(g) != 1.0 or not 2 <= len(opts) <= 255:
                continue
            crit = {str(k): (None if v is None or v == k else v) for k, v in opts.items()}
            # the generators often list the gold first (instruction_execution's deferred_registration 88 %):
            # a seeded shuffle per (state, question) keeps the labels and removes the position habit
            keys = list(crit)
            random.Random(f"kevlike-ts-order:{state}:{qid}").shuffle(keys)
            crit = {k: crit[k] for k in keys}
        elif kind == "score":
            levels = list(spec["criteria"])
            level = answer["score"]
            if level != int(level) or not 0 <= level < len(levels) or not 2 <= len(levels) <= 10:
                continue
            crit, g = levels, str(int(level))
        else:
            continue
        questions[qid] = {"type": kind, "instructions": spec["instructions"], "criteria": crit}
        gold[qid] = g
    if not questions:
        return None
    return {"state": state, "questions": questions}, gold


def _check(generator: str, split: str) -> None:
    if split not in SPLIT_SEEDS:
        raise ValueError(f"unknown split {split!r} (train, validation, test)")
    if generator in SKIPPED:
        raise ValueError(f"tasksource generator {generator!r} is not used: {SKIPPED[generator]}")
    if generator not in GENERATORS:
        raise ValueError(f"unknown tasksource generator {generator!r} (known: {', '.join(GENERATORS)})")


@lru_cache(maxsize=None)
def _split(generator: str, split: str) -> tuple[tuple, frozenset, tuple]:
    """``(rows, states, levels)`` of a split: its rows, every state it or an earlier split (:data:`SPLIT_ORDER`)
    holds, and ``(level, rows drawn at it)`` pairs."""
    _check(generator, split)
    earlier = SPLIT_ORDER[:SPLIT_ORDER.index(split)]
    seen = set().union(*(_split(generator, s)[1] for s in earlier)) if earlier else set()
    mod = module(generator)
    seed, n = SPLIT_SEEDS[split], SPLIT_SIZES[split]
    out, levels = [], [0] * LEVELS
    for i in range(n * MAX_ATTEMPTS):
        if len(out) == n:
            break
        rng = random.Random(f"kevlike-ts:{seed}:{generator}:{i}")
        row = convert(generator, mod.generate(rng, i % LEVELS))
        if row is None or row[0]["state"] in seen:
            continue
        seen.add(row[0]["state"])
        out.append(row)
        levels[i % LEVELS] += 1
    return tuple(out), frozenset(seen), tuple(enumerate(levels))


def rows(generator: str, split: str) -> tuple:
    """The seeded ``(request, gold)`` rows of a generator's split (module docstring).

    Raises:
        ValueError: unknown or skipped generator, unknown split.
        kevlike.data.sources.DataUnavailableError: tasksource is not installed.
    """
    return _split(generator, split)[0]


def levels_of(generator: str, split: str) -> dict[int, int]:
    """How many rows of a split were drawn at each level (the data card's counts)."""
    return dict(_split(generator, split)[2])
