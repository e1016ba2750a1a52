"""Ensembles: several decision models answer the same request and their calibrated distributions are mixed.

A linear opinion pool (Stone 1961, "The opinion pool"; Genest & Zidek 1986, "Combining probability
distributions: a critique and an annotated bibliography"): for each question

    p(option) = Σ_m w_m · p_m(option)              w_m ≥ 0, Σ_m w_m = 1

where ``p_m`` is member ``m``'s served distribution (its own temperatures and score readout applied), and the
same mixture of the members' ``x_abstain`` over the members that have one (a bare backbone's LM readout has none),
their weights renormalised to sum to 1: ``x = Σ_{m∈A} w_m x_m / Σ_{m∈A} w_m`` (uniform over ``A`` where those
weights are all 0 for the question's type); an ensemble none of whose members has it answers without it. A
member's weight is one number, or one per question type (``{"noul": w, "choice": w, "score": w}``): the weights of
each type sum to 1 over the members. The members may
run different backbones and tokenizers: each encodes the request itself, so an ensemble costs the sum of its
members' passes. The mixture can be calibrated
once more as a whole (``kevlike calibrate ENSEMBLE --records RUN/records.jsonl``): its "logits" are the
mixture's log-probabilities, so a temperature ``T`` serves ``softmax(log p / T)`` (a power of the mixture) and
``x_abstain`` gets its own Platt scaling; with no ``calibration.json`` the mixture is served as it is.

An ensemble is a directory holding ``kevlike.json`` with an ``ensemble`` entry (and, after calibration,
``calibration.json``)::

    {"format": 1, "ensemble": {"members": [{"model": "kevlike-default", "weight": 0.6},
                                           {"model": "kevlike-qwen", "weight": 0.4}]}}

A member is a registered model name, an embedded backbone's name (its LM readout, e.g.
``qwen2.5-coder-0.5b-instruct``) or a decision-model directory (a relative path is read from the ensemble's
directory); an ensemble cannot be a member. ``kevlike ensemble A B OUT --weights 0.6 0.4`` writes one;
``--weights noul=0.8,choice=0.6,score=0.7 noul=0.2,choice=0.4,score=0.3`` one with weights per type.
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import torch

from kevlike.config.engine import DEFAULT_OPTIONS, MODES, EngineOptions
from kevlike.model.modeldir import ModelDir, existing_profile_path, save_calibration
from kevlike.model.registry import MANIFEST
from kevlike.model.temperatures import TemperatureTable, read_temperatures
from kevlike.request.answers import Decision, answer, thresholds
from kevlike.request.schema import Request, prepare_each

WEIGHT_TOLERANCE = 1e-6
"""How far the member weights may sum from 1 (they are written with a few decimals)."""

UNCALIBRATED = "T = 1: the mixture as it is (not calibrated)"
"""The temperatures' ``source`` of an ensemble that was not calibrated (what :func:`write_ensemble` writes)."""

X_BOUNDS = (1e-300, 1 - 1e-16)
"""Where a mixed ``x_abstain`` is clamped before its logit is taken (float64: both ends stay finite)."""

MIN_PROB = 1e-30
"""The floor under a mixed probability before its log is taken (a mixture of float32 softmaxes can hold 0)."""

QUESTION_TYPES = ("noul", "choice", "score")
"""The keys of a per-type weight."""


class EnsembleError(ValueError):
    """An ensemble manifest that cannot be served; the message names the file and the field."""


@dataclass(frozen=True)
class Member:
    """One member of an ensemble: ``model`` as written in the manifest, ``resolved`` the name or path loaded."""

    model: str
    weight: float | dict[str, float]      # one number, or one per question type (QUESTION_TYPES)
    resolved: str


def _weight(w, field: str) -> float | dict[str, float]:
    """A member's weight as written (a number, or ``{type: number}`` over exactly :data:`QUESTION_TYPES`),
    checked; ``field`` names it in the error.

    Raises:
        ValueError: not a finite number ≥ 0, or a mapping whose keys are not the three types.
    """
    if isinstance(w, dict):
        if set(w) != set(QUESTION_TYPES):
            raise ValueError(f"{field} per question type must name exactly {', '.join(QUESTION_TYPES)}, "
                             f"got {sorted(w)!r}"[:300])
        return {t: _weight(w[t], f"{field}.{t}") for t in QUESTION_TYPES}
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
        raise ValueError(f"{field} must be a finite number ≥ 0, got {w!r}"[:300])
    return float(w)


def type_weights(weights: Sequence) -> dict[str, list[float]]:
    """Per question type, the members' weights ``{type: [w_1, …, w_M]}`` from one weight per member (a number,
    the same for every type, or ``{"noul": w, "choice": w, "score": w}``).

    Raises:
        ValueError: a weight is negative, not finite or a mapping of other keys; the weights of a type do not
            sum to 1 (within :data:`WEIGHT_TOLERANCE`).
    """
    ws = [_weight(w, f"weight {i}") for i, w in enumerate(weights)]
    out = {t: [w[t] if isinstance(w, dict) else w for w in ws] for t in QUESTION_TYPES}
    for t, col in out.items():
        if abs(sum(col) - 1.0) > WEIGHT_TOLERANCE:
            raise ValueError(f"the member weights sum to {sum(col):.6g}, not 1"
                             + (f" for {t} questions" if any(isinstance(w, dict) for w in ws) else ""))
    return out


def weight_text(w: float | dict[str, float]) -> str:
    """``0.6``, or ``noul 0.8 / choice 0.6 / score 0.7`` for a per-type weight (for one-line descriptions)."""
    if isinstance(w, dict):
        return " / ".join(f"{t} {w[t]:g}" for t in QUESTION_TYPES)
    return f"{w:g}"


def read_members(path: str | os.PathLike) -> list[Member]:
    """The members of the ensemble at ``path``, checked.

    Raises:
        EnsembleError: the manifest's ``ensemble.members`` is not a list of at least one ``{"model": str,
            "weight": number or {type: number}}``; a weight is negative or not finite; the weights (of a type) do
            not sum to 1 (within :data:`WEIGHT_TOLERANCE`); a member is named twice; a member is itself an
            ensemble, or names no registered model and no decision-model directory.
    """
    from kevlike.model.registry import EMBEDDED, MODELS, ensemble_members, model_kind

    path = Path(path)
    where = f"{path / MANIFEST}"
    try:
        spec = json.loads((path / MANIFEST).read_text())["ensemble"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EnsembleError(f"{where}: cannot read its 'ensemble' entry ({e})") from None
    members = spec.get("members") if isinstance(spec, dict) else None
    if not isinstance(members, list) or not members:
        raise EnsembleError(f"{where}: ensemble.members must be a non-empty list of {{\"model\", \"weight\"}}")
    out = []
    for i, m in enumerate(members):
        field = f"ensemble.members[{i}]"
        if not isinstance(m, dict) or set(m) != {"model", "weight"}:
            raise EnsembleError(f"{where}: {field} must hold exactly 'model' and 'weight', got {m!r}"[:300])
        name, w = m["model"], m["weight"]
        if not isinstance(name, str) or not name:
            raise EnsembleError(f"{where}: {field}.model must be a model name or directory")
        try:
            w = _weight(w, f"{field}.weight")
        except ValueError as e:
            raise EnsembleError(f"{where}: {e}") from None
        resolved = name
        if name not in MODELS and name not in EMBEDDED and not Path(name).is_absolute():
            resolved = str(path / name) if (path / name).exists() else name
        if model_kind(resolved) is None:
            raise EnsembleError(f"{where}: {field}.model {name!r} is not a registered model or a model directory")
        if ensemble_members(resolved) is not None:
            raise EnsembleError(f"{where}: {field}.model {name!r} is an ensemble; members must be single models")
        if resolved in [x.resolved for x in out]:
            raise EnsembleError(f"{where}: {field}.model {name!r} is named twice")
        out.append(Member(name, w, resolved))
    try:
        type_weights([m.weight for m in out])
    except ValueError as e:
        raise EnsembleError(f"{where}: {e}") from None
    return out


def write_ensemble(out: str | os.PathLike, members: Sequence[str], weights: Sequence[float | dict[str, float]],
                   note: str | None = None) -> Path:
    """Write an ensemble directory ``out`` of ``members`` (registered names or decision-model directories, stored
    as absolute paths) with ``weights``; ``note`` (how the weights were chosen) goes into the manifest, and a
    ``calibration.json`` at T = 1 beside it (the mixture as it is, until ``kevlike calibrate``). The manifest is
    checked by :func:`read_members` before the call returns.

    Raises:
        EnsembleError: as :func:`read_members`, or ``out`` already holds a model, or the counts differ.
    """
    from kevlike.model.registry import EMBEDDED, MODELS

    out = Path(out)
    if len(members) != len(weights):
        raise EnsembleError(f"{len(members)} members but {len(weights)} weights")
    if ModelDir.holds_one(out):
        raise EnsembleError(f"{out} already holds a model ({MANIFEST}); choose another directory")
    spec = {"members": [{"model": m if m in MODELS or m in EMBEDDED else str(Path(m).resolve()),
                         "weight": {t: float(w[t]) for t in w} if isinstance(w, dict) else float(w)}
                        for m, w in zip(members, weights)]}
    manifest = {"format": 1, "ensemble": spec, **({"note": note} if note else {})}
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    try:
        read_members(out)
    except EnsembleError:
        (out / MANIFEST).unlink()
        raise
    save_calibration(out, TemperatureTable(source=UNCALIBRATED))
    return out


@dataclass(frozen=True)
class EnsembleEncoded:
    """A request encoded by every member: ``parts[m]`` is member ``m``'s encoding (its own tokenizer)."""

    request: Request
    parts: tuple

    @property
    def n_tokens(self) -> int:
        return sum(p.n_tokens for p in self.parts)


@dataclass(frozen=True)
class EnsemblePrepared:
    """One request prepared by every member (:meth:`EnsembleEngine.prepare`); the server's batcher budgets a batch
    by ``n_tokens``, the sum over members."""

    request: Request
    parts: tuple          # kevlike.model.engine.Prepared, one per member

    @property
    def n_tokens(self) -> int:
        return sum(p.n_tokens for p in self.parts)


class _Readout:
    name = "ensemble"


class EnsembleEngine:
    """An :class:`~kevlike.model.engine.Engine`-like object that answers with a linear opinion pool of its
    members (module docstring); ``decide``, ``decide_batch``, ``prepare`` and ``run`` answer as an engine does, and
    ``encode``/``question_outputs``/``probabilities`` give the evaluation its records.

    Args:
        members: loaded member engines.
        weights: one weight per member, ≥ 0, summing to 1: a number, or ``{"noul": w, "choice": w, "score": w}``
            (each type's weights summing to 1; :func:`type_weights`).
        name: the model name responses report.
        temperatures: the mixture's own calibration (default: served as mixed, T = 1).
        artifact_dir: the ensemble's directory (calibration is written there).
        abstain_above, p_right_below: as :class:`kevlike.config.engine.EngineOptions`.

    Raises:
        ValueError: no members, a count mismatch, or weights that are negative or do not sum to 1 (per type).
    """

    readout = _Readout()
    option_orders = None
    option_mode = "list"          # the mixture's temperatures are looked up as list-mode types
    temperature_mode = "list"
    profile = None
    state_cache = None            # each member keeps its own (EngineOptions.state_cache_mb is per member)

    def __init__(self, members: Sequence, weights: Sequence[float | dict[str, float]], *, name: str,
                 temperatures: TemperatureTable | None = None, artifact_dir: Path | None = None,
                 abstain_above: float | None = None, p_right_below: float | None = None):
        if not members or len(members) != len(weights):
            raise ValueError(f"an ensemble needs one weight per member (got {len(members)} members, "
                             f"{len(weights)} weights)")
        try:
            self.weights = type_weights(weights)          # {type: [w_m]}
        except ValueError as e:
            raise ValueError(f"ensemble weights: {e}; got {list(weights)}") from None
        self.member_weights = list(weights)
        self.members = list(members)
        self.name = name
        self.temperatures = temperatures or TemperatureTable(source=UNCALIBRATED)
        self.artifact_dir = artifact_dir
        self.abstain_above = abstain_above
        self.p_right_below = p_right_below
        self.limits = self.members[0].limits
        self.device = self.members[0].device
        self.thread_policy = self.members[0].thread_policy
        self.model = self            # the server gives each distinct model its own thread
        self.abstainers = [i for i, m in enumerate(self.members) if getattr(m, "abstain", False)]
        self.abstain = bool(self.abstainers)
        self.dtype = "/".join(dict.fromkeys(m.dtype for m in self.members))
        self.dtype_reason = "; ".join(f"{m.name}: {m.dtype_reason}" for m in self.members)

    @classmethod
    def from_dir(cls, path: str | os.PathLike, options: EngineOptions = DEFAULT_OPTIONS, *, load,
                 name: str | None = None, device=None, backend: str | None = None) -> "EnsembleEngine":
        """Load the ensemble at ``path``: each member with ``load(name_or_path, options, device=, backend=)``
        (:meth:`kevlike.model.engine.Engine.from_pretrained`, which calls this for an ensemble), then the mixture's
        ``calibration.json`` where there is one.

        Raises:
            EnsembleError: a bad manifest (:func:`read_members`), or a setting an ensemble does not take (an option
                mode or option orders: each member reads in its own).
            ValueError: ``options.profile`` names no profile of the ensemble (a profile calibrates the mixture;
                the members load without one).
            kevlike.model.temperatures.ProfileError: an invalid ``calibration.json``.
            kevlike.model.backbones.ModelNotFoundError, SetupError: a member cannot be loaded.
        """
        path = Path(path)
        for f in ("option_mode", "option_orders"):
            if getattr(options, f) is not None:
                raise EnsembleError(f"ensemble {name or path}: --{f.replace('_', '-')} does not apply (each member "
                                    f"answers in its own)")
        members = read_members(path)
        if options.profile is not None:         # the mixture's profile, checked before any member loads
            existing_profile_path(path, name or str(path), options.profile)
        engines = [load(m.resolved, replace(options, profile=None), device=device, backend=backend) for m in members]
        cal = ModelDir(path).calibration_path
        table = read_temperatures(cal) if cal.is_file() else None
        out = cls(engines, [m.weight for m in members], name=name or str(path), temperatures=table,
                  artifact_dir=path, abstain_above=options.abstain_above,
                  p_right_below=options.p_right_below)
        return out.with_profile(options.profile) if options.profile is not None else out

    def describe(self) -> str:
        """One line: the members with their weights and descriptions, and the mixture's calibration."""
        parts = "; ".join(f"{weight_text(w)} × {m.name} ({m.describe()})"
                          for m, w in zip(self.members, self.member_weights))
        source = self.temperatures.source.split(" (")[0]      # a fit's source lists every split it read
        return f"ensemble (linear pool) of {parts}; mixture temperatures: {source}"

    def with_profile(self, profile: str) -> "EnsembleEngine":
        """An ensemble sharing these members whose mixture is served with the temperatures of calibration profile
        ``profile`` (``kevlike calibrate ENSEMBLE --data FILE --profile NAME`` fits one on your labelled requests;
        the members keep their own), named ``{name}@{profile}``.

        Raises:
            ValueError: the ensemble has no directory with that profile.
        """
        base = self.name.split("@")[0]
        if self.artifact_dir is None:
            raise ValueError(f"ensemble {base!r} was not loaded from a directory: it has no profiles")
        other = copy.copy(self)
        other.temperatures = read_temperatures(existing_profile_path(self.artifact_dir, base, profile))
        other.name, other.profile = f"{base}@{profile}", profile
        return other

    # -- the evaluation's path: encode, question_outputs, probabilities ------------------------------------
    def encode(self, request: Request, option_mode: str | None = None) -> EnsembleEncoded:
        """Every member's encoding of ``request`` (``option_mode`` must be None: members read in their own)."""
        if option_mode is not None:
            raise ValueError("an ensemble's members read in their own option modes")
        return EnsembleEncoded(request, tuple(m.encode(request) for m in self.members))

    def _mixed(self, request: Request, per_member: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
        """``Σ_m w_m p_m`` per question (``w`` of the question's type), from ``per_member[m][q]`` ``[K]``
        (float32)."""
        return [sum(w * p[i].double() for w, p in zip(self.weights[q.type], per_member)).float()
                for i, q in enumerate(request.questions)]

    def _mixed_abstain(self, request: Request, xs: Sequence[torch.Tensor]) -> torch.Tensor:
        """``Σ_{m∈A} w_m x_m / Σ_{m∈A} w_m`` per question (float64 ``[Q]``), from ``xs[j]`` ``[Q]`` the
        ``x_abstain`` of the ``j``-th member that has one (``A``, :attr:`abstainers`)."""
        w = torch.tensor([[self.weights[q.type][i] for i in self.abstainers] for q in request.questions],
                         dtype=torch.float64)                                                    # [Q, |A|]
        return (_renormalised(w) * torch.stack(list(xs), -1)).sum(-1)

    def question_outputs(self, encoded: Sequence[EnsembleEncoded], padding_side: str = "right"):
        """Per request, per question: the log of the mixed distribution ``[K]`` (the mixture's "logits":
        ``softmax`` of them at ``T = 1`` is the mixture) and, when a member has ``x_abstain``, the logit of the
        mixed ``x_abstain`` (float64 logit of a probability, :meth:`_mixed_abstain`); else None for the second."""
        probs = [[] for _ in encoded]        # [request][member] -> list of [K]
        xs = [[] for _ in encoded]
        for mi, m in enumerate(self.members):
            parts = [e.parts[mi] for e in encoded]
            logits, abstain = m.question_outputs(parts, padding_side)      # abstain None: no x_abstain
            for b, e in enumerate(encoded):
                probs[b].append(m.probabilities(e.request, logits[b]))
                if abstain is not None:
                    xs[b].append(torch.tensor([m.abstain_probability(a) for a in abstain[b]], dtype=torch.float64))
        logits = [[_log(p) for p in self._mixed(e.request, pm)] for e, pm in zip(encoded, probs)]
        if not self.abstain:
            return logits, None
        return logits, [_logit(self._mixed_abstain(e.request, xs[b])) for b, e in enumerate(encoded)]

    def question_logits(self, encoded: Sequence[EnsembleEncoded], padding_side: str = "right"):
        """The first half of :meth:`question_outputs`."""
        return self.question_outputs(encoded, padding_side)[0]

    def probabilities(self, request: Request, logits: list[torch.Tensor]) -> list[torch.Tensor]:
        """The served distribution per question: ``softmax(z / T(type, K))`` of the mixture's log-probabilities
        ``z``, then the table's score readout (both identities when the mixture is not calibrated)."""
        return [self.temperatures.readout(q.type, p) for q, p in zip(request.questions, self._tempered(request, logits))]

    def _tempered(self, request: Request, logits: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per question ``softmax(z / T(type, K))`` ``[K]`` of the mixture's log-probabilities, before any score
        readout (:meth:`probabilities`)."""
        t = self.temperatures
        return [torch.softmax(z / t.lookup(q.type, len(q.options)), -1) for q, z in zip(request.questions, logits)]

    def abstain_probability(self, a) -> float:
        """``x_abstain`` of a mixed-abstention logit ``a`` under the mixture's Platt scaling."""
        return self.temperatures.abstain_probability(a)

    # -- the serving path: prepare, run, decide ---------------------------------------------------------
    def prepare(self, request: Any) -> EnsemblePrepared:
        """Every member's :meth:`Engine.prepare` of ``request``.

        Raises:
            RequestError: the first member's refusal (invalid, over a member's token budget, a script policy).
        """
        parts = tuple(m.prepare(request) for m in self.members)
        return EnsemblePrepared(parts[0].request, parts)

    def run(self, prepared: Sequence[EnsemblePrepared], *, mode: str = "packed") -> list[dict]:
        """Each member answers its part of every request; the answers are mixed question by question."""
        if not prepared:
            return []
        answered = [m.run([p.parts[mi] for p in prepared], mode=mode) for mi, m in enumerate(self.members)]
        return [self._respond(p, [a[i] for a in answered]) for i, p in enumerate(prepared)]

    def decide(self, request: Any, *, mode: str = "packed") -> dict:
        """Answer one request (dict, JSON text or :class:`Request`); returns the Jev response dict.

        Raises:
            RequestError: invalid request (422) or over a member's token budget (413).
            ValueError: unknown ``mode``.
        """
        return self.decide_batch([request], mode=mode)[0]

    def decide_batch(self, requests: Sequence[Any], *, mode: str = "packed") -> list[dict]:
        """Answer several requests (see :meth:`Engine.decide_batch`)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        return self.run(prepare_each(self.prepare, requests), mode=mode)

    def _respond(self, prepared: EnsemblePrepared, responses: list[dict]) -> dict:
        request = prepared.request
        per_member = [[_distribution(q, r["answers"][q.id]) for q in request.questions] for r in responses]
        table = self.temperatures
        tempered = self._tempered(request, [_log(p) for p in self._mixed(request, per_member)])
        probs = [table.readout(q.type, p) for q, p in zip(request.questions, tempered)]
        pre = {q.id: p.tolist() for q, p in zip(request.questions, tempered) if table.reads_normal(q.type, len(q.options))}
        cutoffs = thresholds(request, self.abstain_above, self.p_right_below)
        mixed_x = None
        if self.abstain:
            mixed_x = self._mixed_abstain(request, [torch.tensor([responses[i]["answers"][q.id]["x_abstain"]
                                                                  for q in request.questions], dtype=torch.float64)
                                                    for i in self.abstainers]).tolist()
        answers = {}
        for i, (q, p) in enumerate(zip(request.questions, probs)):
            extra = {} if mixed_x is None else {"x_abstain": self.abstain_probability(_logit(mixed_x[i])), **cutoffs}
            answers[q.id] = answer(q, p.tolist(), **extra)
        out = {"model": self.name, "answers": answers,
               "usage": {"input_tokens": sum(r["usage"]["input_tokens"] for r in responses), "output_tokens": 0},
               "x_input": responses[0]["x_input"]}
        cached = [r["x_cached_tokens"] for r in responses if "x_cached_tokens" in r]
        if cached:
            out["x_cached_tokens"] = sum(cached)
        shortlist = {}
        for r in responses:
            for k, v in r.get("x_shortlist", {}).items():
                shortlist[k] = max(shortlist.get(k, 0), v)
        if shortlist:
            out["x_shortlist"] = shortlist
        return Decision(out, pre)


def _renormalised(w: torch.Tensor) -> torch.Tensor:
    """Rows of ``w`` ``[Q, M]`` (weights ≥ 0) scaled to sum to 1; a row of zeros becomes uniform."""
    total = w.sum(-1, keepdim=True)
    return torch.where(total > 0, w / total.clamp_min(1e-300), torch.full_like(w, 1.0 / w.shape[-1]))


def _log(p: torch.Tensor) -> torch.Tensor:
    """``log p`` ``[K]`` of a mixed distribution, floored at :data:`MIN_PROB`: the mixture's "logits"."""
    return torch.log(p.clamp_min(MIN_PROB))


def _logit(x):
    """``log(x / (1 − x))`` of a mixed ``x_abstain`` (a float, or a float64 tensor of them), ``x`` clamped into
    :data:`X_BOUNDS` first; a float in, a float out."""
    t = torch.as_tensor(x, dtype=torch.float64).clamp(*X_BOUNDS)
    z = torch.log(t) - torch.log1p(-t)
    return float(z) if not isinstance(x, torch.Tensor) else z


def _distribution(question, ans: dict) -> torch.Tensor:
    """A member's served distribution ``[K]`` (option order) read back from its Jev answer object."""
    if question.type == "noul":
        return torch.tensor([ans["noul"], 1.0 - ans["noul"]], dtype=torch.float64)
    return torch.tensor([ans["probabilities"][o.key] for o in question.options], dtype=torch.float64)



def pool_records(members: Sequence[Sequence[dict]], weights: Sequence[float | dict[str, float]]) -> list[dict]:
    """The records an ensemble's evaluation would write, from its members' records of the same questions
    (:func:`kevlike.metrics.records_from_logits`, each member calibrated): ``probs`` = ``Σ_m w_m probs_m`` (``w``
    of the record's question type where the weights are per type, :func:`type_weights`),
    ``logits`` = ``log probs`` (the mixture's uncalibrated "logits", :meth:`EnsembleEngine.question_outputs`),
    and where a member has ``x_abstain``, the mixture of those members' (weights renormalised over them, as
    :meth:`EnsembleEngine._mixed_abstain`) and its logit ``abstain_logit``. The other fields are
    the first member's. Choosing weights on validation records needs no forward pass this way; the records are
    those of an uncalibrated ensemble (re-score them with :func:`kevlike.eval.heldout.rescore` after a fit).

    Raises:
        ValueError: the members' records differ in length, or at some position in question (split, source,
            question id, type or gold); pair them first (:func:`kevlike.eval.unseen.shared_questions`). Weights
            as :func:`type_weights` refuses them.
    """
    if not members or len(members) != len(weights):
        raise ValueError(f"one weight per member's records (got {len(members)} and {len(weights)})")
    by_type = type_weights(weights)
    n = len(members[0])
    if any(len(m) != n for m in members):
        raise ValueError(f"the members' records differ in length ({[len(m) for m in members]}): pair them first")
    keys = ("split", "source", "question", "type", "gold")
    out = []
    for i, rs in enumerate(zip(*members)):
        if any(tuple(r.get(k) for k in keys) != tuple(rs[0].get(k) for k in keys) for r in rs[1:]):
            raise ValueError(f"record {i}: the members answer different questions ({[r.get('question') for r in rs]})")
        ws = by_type[rs[0]["type"]]
        p = sum(w * torch.tensor(r["probs"], dtype=torch.float64) for w, r in zip(ws, rs)).float()
        rec = {**rs[0], "probs": p.tolist(), "logits": _log(p).tolist()}
        rec.pop("abstain_logit", None), rec.pop("x_abstain", None)
        have = [(w, r["x_abstain"]) for w, r in zip(ws, rs) if r.get("x_abstain") is not None]
        if have:
            wa = _renormalised(torch.tensor([[w for w, _ in have]], dtype=torch.float64))[0]
            x = float(sum(w * xa for w, (_, xa) in zip(wa, have)))
            rec["x_abstain"], rec["abstain_logit"] = min(max(x, X_BOUNDS[0]), X_BOUNDS[1]), _logit(x)
        out.append(rec)
    return out
