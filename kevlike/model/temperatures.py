"""Temperatures per (question type, option-count bucket) (DESIGN.md §9), applied at serve time as
``z / T``. Fitting them on held-out logits is the calibration issue's work; until an artifact
carries fitted values every temperature is 1 (the table says so in ``source``)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch

BUCKETS = ((2, 2), (3, 5), (6, 20), (21, 255))
BUCKET_LABELS = ("2", "3-5", "6-20", "21-255", "256+")
TYPES = ("noul", "choice", "score", "choice:set", "abstain")  # the keys a temperature is stored under (calibration_type;
                                                              # "abstain": x_abstain's, by_type only)
T_LIMITS = (0.01, 100.0)        # a temperature outside these is refused (fits stay within T_MIN, T_MAX below)
BIAS_LIMIT = 100.0              # |abstain_bias| above this is refused (the fit searches the bias within it)
PROFILE_FORMAT = 1              # the "format" of a calibration file (absent: 1, the files written before it existed)
SCORE_READOUTS = ("softmax", "normal")   # how a score question's probabilities are read (score_readout)
VAR_FLOOR = 0.02                # the least variance, in levels², of the "normal" score readout (normal_readout)
NORMAL_MIN_LEVELS = 3           # fewer levels are read by softmax under the "normal" score readout too


def bucket_of(k: int) -> str:
    """Bucket label for an option (or level) count, e.g. ``"3-5"``; ``"256+"`` for the choices beyond
    Jev's 255 options that ``--max-options`` allows.

    Raises:
        ValueError: k below 2.
    """
    for lo, hi in BUCKETS:
        if lo <= k <= hi:
            return f"{lo}" if lo == hi else f"{lo}-{hi}"
    if k > BUCKETS[-1][1]:
        return f"{BUCKETS[-1][1] + 1}+"
    raise ValueError(f"option count {k} is below 2")


def calibration_type(qtype: str, option_mode: str = "list") -> str:
    """The key a question's temperature is stored under: its type, or ``"choice:set"`` for a choice
    question read in set mode (its logits come from another template, so they get their own fit)."""
    return f"{qtype}:set" if option_mode == "set" and qtype == "choice" else qtype


class ProfileError(ValueError):
    """A temperature table, calibration file or profile that cannot be served. ``str()`` is one line naming the
    file (when read from one), the field and the rule, e.g.
    ``profiles/ops.json: by_type.noul: temperature must be a finite number from 0.01 to 100, got -1``."""


def check_temperature(where: str, t) -> float:
    """``t`` as a float if it is a finite number within :data:`T_LIMITS` (a bool, a string or NaN is not).

    Raises:
        ProfileError: ``where: temperature must be …, got …``.
    """
    lo, hi = T_LIMITS
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not (lo <= t <= hi):
        raise ProfileError(f"{where}: temperature must be a finite number from {lo:g} to {hi:g}, got {t!r}")
    return float(t)


def check_bias(where: str, b) -> float:
    """``b`` as a float if it is a finite number with ``|b| <=`` :data:`BIAS_LIMIT` (a bool, a string or NaN is not).

    Raises:
        ProfileError: ``where: bias must be …, got …``.
    """
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not (-BIAS_LIMIT <= b <= BIAS_LIMIT):
        raise ProfileError(f"{where}: bias must be a finite number from {-BIAS_LIMIT:g} to {BIAS_LIMIT:g}, got {b!r}")
    return float(b)


def normal_logits(p: torch.Tensor) -> torch.Tensor:
    """Logits ``[..., K]`` of the discretised normal with the mean and variance of ``p`` ``[..., K]``
    (probabilities over ordered levels 0 … K−1): ``−(k − μ)² / 2σ²`` with ``μ = Σ k p_k``,
    ``σ² = max(Σ (k − μ)² p_k, VAR_FLOOR)``, in ``p``'s dtype and differentiable through μ and σ². Trailing levels
    of probability 0 (padding) move neither μ nor σ²; their logits are finite, for the caller to mask. Shared by
    :func:`normal_readout` (serving) and :func:`kevlike.training.losses.normal_readout_nll` (training)."""
    k = torch.arange(p.shape[-1], dtype=p.dtype, device=p.device)
    mu = (k * p).sum(-1, keepdim=True)
    var = ((k - mu) ** 2 * p).sum(-1, keepdim=True).clamp_min(VAR_FLOOR)
    return -(k - mu) ** 2 / (2 * var)


def normal_readout(p: torch.Tensor) -> torch.Tensor:
    """The ``"normal"`` score readout: a distribution ``p`` ``[K]`` over ordered levels (probabilities) mapped to
    the discretised normal with its own mean and variance, ``q_k ∝ exp(−(k − μ)² / 2σ²)`` with ``μ = Σ k p_k``
    and ``σ² = max(Σ (k − μ)² p_k, VAR_FLOOR)`` (levels as 0 … K−1). Returns probabilities ``[K]`` in ``p``'s
    dtype; the argmax is the level nearest the mean.

    Why: the pointer head scores each level like an option and does not know their order, and on pages its
    score distributions put mass on both extremes while the answer lies between them; the mean keeps what the
    distribution knows about the order and the variance keeps its confidence (docs/results/stage27/README.md).
    Computed in float64 (a one-hot ``p`` gives σ² = VAR_FLOOR, not a division by zero). Two levels are returned
    unchanged: their mode is already the level nearest the mean, and a two-point normal would only stretch the
    confidence (0.9 would be served as 0.988).
    """
    if p.shape[-1] < NORMAL_MIN_LEVELS:
        return p
    return torch.softmax(normal_logits(p.to(torch.float64)), -1).to(p.dtype)


@dataclass(frozen=True)
class TemperatureTable:
    """``by_bucket[(type, bucket)]``, else ``by_type[type]``, else 1. Set-mode choice questions look up
    ``choice:set`` first and fall back to ``choice``'s entries.

    ``x_abstain`` is Platt-scaled: ``sigmoid(a / by_type["abstain"] + abstain_bias)`` (Platt 1999, "Probabilistic
    outputs for support vector machines"; the option logits get a temperature only, which keeps their argmax).

    ``score_readout``: ``"softmax"`` (score questions read like the others) or ``"normal"`` (``softmax(z / T)``
    then :func:`normal_readout`: chosen by the fit when its NLL is lower, :func:`fit_table`).

    Every temperature is checked on construction (:func:`check_temperature`; types from :data:`TYPES`, buckets
    from :data:`BUCKET_LABELS`), so no table can serve a NaN, an infinity, a sign flip or a division by zero.

    Raises:
        ProfileError: a temperature, type or bucket outside those rules (the message names the field).
    """

    by_bucket: dict = field(default_factory=dict)
    by_type: dict = field(default_factory=dict)
    source: str = "default: T = 1 (not fitted)"
    abstain_bias: float = 0.0
    score_readout: str = "softmax"

    def __post_init__(self):
        if not isinstance(self.by_type, dict) or not isinstance(self.by_bucket, dict):
            raise ProfileError("by_type and by_bucket must be mappings")
        for t, v in self.by_type.items():
            if t not in TYPES:
                raise ProfileError(f"by_type.{t}: unknown question type (known: {', '.join(TYPES)})")
            check_temperature(f"by_type.{t}", v)
        for key, v in self.by_bucket.items():
            if not (isinstance(key, tuple) and len(key) == 2):
                raise ProfileError(f"by_bucket: key {key!r} is not a (type, bucket) pair")
            t, b = key
            if t not in TYPES:
                raise ProfileError(f"by_bucket[{t}/{b}]: unknown question type (known: {', '.join(TYPES)})")
            if b not in BUCKET_LABELS:
                raise ProfileError(f"by_bucket[{t}/{b}]: unknown bucket (known: {', '.join(BUCKET_LABELS)})")
            check_temperature(f"by_bucket[{t}/{b}]", v)
        if not isinstance(self.source, str):
            raise ProfileError(f"source must be a string, got {self.source!r}")
        object.__setattr__(self, "abstain_bias", check_bias("abstain_bias", self.abstain_bias))
        if self.score_readout not in SCORE_READOUTS:
            raise ProfileError(f"score_readout: must be one of {', '.join(SCORE_READOUTS)}, got {self.score_readout!r}")

    def to_json(self) -> dict:
        """The calibration-file form (``calibration.json``, ``profiles/NAME.json``), without the fit report;
        ``abstain_bias`` only when it is not 0 and ``score_readout`` only when it is not softmax (so a file without
        them reads as before)."""
        out = {"format": PROFILE_FORMAT, "source": self.source, "by_type": dict(self.by_type),
               "by_bucket": [{"type": k[0], "bucket": k[1], "temperature": v} for k, v in self.by_bucket.items()]}
        if self.abstain_bias:
            out["abstain_bias"] = self.abstain_bias
        if self.score_readout != "softmax":
            out["score_readout"] = self.score_readout
        return out

    @classmethod
    def from_json(cls, obj, where: str = "calibration file") -> "TemperatureTable":
        """Parse and check a calibration file's JSON object: ``source`` (text), ``by_type`` ``{type: T}`` and
        ``by_bucket`` ``[{"type", "bucket", "temperature"}]`` (required); ``format`` (optional,
        :data:`PROFILE_FORMAT`), ``abstain_bias`` (optional, 0 when absent; x_abstain's Platt bias),
        ``score_readout`` (optional, ``"softmax"`` when absent; one of :data:`SCORE_READOUTS`) and ``fit``
        (optional, the fit report; not read). Unknown fields are refused.

        Raises:
            ProfileError: one line, ``WHERE: FIELD: what is wrong``.
        """
        known = ("format", "source", "by_type", "by_bucket", "abstain_bias", "score_readout", "fit")
        if not isinstance(obj, dict):
            raise ProfileError(f"{where}: must be a JSON object with by_type and by_bucket, got {type(obj).__name__}")
        for k in obj:
            if k not in known:
                raise ProfileError(f"{where}: {k}: unknown field (known: {', '.join(known)})")
        fmt = obj.get("format", PROFILE_FORMAT)
        if isinstance(fmt, bool) or fmt != PROFILE_FORMAT:
            raise ProfileError(f"{where}: format: unsupported calibration-file format {fmt!r} (this version reads "
                               f"{PROFILE_FORMAT})")
        for k in ("source", "by_type", "by_bucket"):
            if k not in obj:
                raise ProfileError(f"{where}: {k}: required field missing")
        if not isinstance(obj["source"], str):
            raise ProfileError(f"{where}: source: must be a string")
        if not isinstance(obj["by_type"], dict):
            raise ProfileError(f"{where}: by_type: must be an object {{type: temperature}}")
        if not isinstance(obj["by_bucket"], list):
            raise ProfileError(f"{where}: by_bucket: must be a list of {{type, bucket, temperature}}")
        by_bucket = {}
        for i, row in enumerate(obj["by_bucket"]):
            if not (isinstance(row, dict) and set(row) == {"type", "bucket", "temperature"}):
                raise ProfileError(f"{where}: by_bucket[{i}]: must be an object with exactly type, bucket and "
                                   f"temperature")
            if not (isinstance(row["type"], str) and isinstance(row["bucket"], str)):
                raise ProfileError(f"{where}: by_bucket[{i}]: type and bucket must be strings")
            if (row["type"], row["bucket"]) in by_bucket:
                raise ProfileError(f"{where}: by_bucket[{i}]: {row['type']}/{row['bucket']} appears twice")
            by_bucket[(row["type"], row["bucket"])] = row["temperature"]
        try:
            return cls(by_bucket=by_bucket, by_type=dict(obj["by_type"]), source=obj["source"],
                       abstain_bias=obj.get("abstain_bias", 0.0), score_readout=obj.get("score_readout", "softmax"))
        except ProfileError as e:
            raise ProfileError(f"{where}: {e}") from None

    @property
    def abstain_scaling(self) -> tuple[float, float]:
        """x_abstain's Platt scaling ``(T, bias)``: the ``abstain`` temperature (1 when not fitted) and
        ``abstain_bias``."""
        return self.lookup("abstain", 2), self.abstain_bias

    def abstain_probability(self, a: torch.Tensor | float) -> float:
        """``x_abstain = sigmoid(a / T_abstain + abstain_bias)`` (a probability) of an uncalibrated abstention
        logit ``a``; ``T_abstain`` is this table's ``abstain`` entry (1 when not fitted), ``abstain_bias`` 0 when not
        fitted. Computed in float64, so that the logit can be read back from the probability (the outcome store
        does) for ``a / T + bias`` from about −700 to +36; float32 would round to 1 above +16.6."""
        t, bias = self.abstain_scaling
        z = torch.as_tensor(a, dtype=torch.float64) / t + bias
        return float(torch.sigmoid(z))

    def reads_normal(self, qtype: str, k: int) -> bool:
        """Whether a ``qtype`` question with ``k`` options is served through :func:`normal_readout` (a score
        question of at least :data:`NORMAL_MIN_LEVELS` levels, under ``score_readout: "normal"``)."""
        return qtype == "score" and self.score_readout == "normal" and k >= NORMAL_MIN_LEVELS

    def readout(self, qtype: str, p: torch.Tensor) -> torch.Tensor:
        """A ``qtype`` question's served probabilities ``[K]`` from its tempered softmax ``p`` ``[K]``:
        :func:`normal_readout` where :meth:`reads_normal`, else ``p``."""
        return normal_readout(p) if self.reads_normal(qtype, p.shape[-1]) else p

    def probabilities(self, qtype: str, z: torch.Tensor, option_mode: str = "list") -> torch.Tensor:
        """Served probabilities ``[K]`` of uncalibrated logits ``z`` ``[K]``: ``softmax(z / T(type, K))``, then
        :meth:`readout` (records re-scored without a forward pass use this)."""
        return self.readout(qtype, torch.softmax(z / self.lookup(qtype, len(z), option_mode), -1))

    def lookup(self, qtype: str, k: int, option_mode: str = "list") -> float:
        """The temperature of a ``qtype`` question with ``k`` options read in ``option_mode``."""
        key = calibration_type(qtype, option_mode)
        for t in (self.by_bucket.get((key, bucket_of(k))), self.by_type.get(key)):
            if t is not None:
                return float(t)
        if key != qtype:
            return self.lookup(qtype, k)
        return 1.0


def read_temperatures(path: str | Path) -> TemperatureTable:
    """Read and check a calibration file or profile (``calibration.json``, ``profiles/NAME.json``); JSON's
    ``NaN``/``Infinity`` are refused like any other non-finite temperature.

    Raises:
        ProfileError: one line naming the file and the field (unreadable file, invalid JSON, a key written twice
            in one object, a missing or unknown field, an unknown format, a temperature that is not a finite
            number within :data:`T_LIMITS`).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")      # a leading BOM (Windows editors) is not content
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None

    def unique(pairs: list) -> dict:   # a key written twice: which one was meant is not ours to guess
        out = {}
        for k, v in pairs:
            if k in out:
                raise ProfileError(f"{path}: key {k!r} appears more than once in one object")
            out[k] = v
        return out

    try:     # NaN / Infinity, and integers too long to be a count, read as floats: the field check below refuses
        obj = json.loads(text, parse_constant=float, object_pairs_hook=unique,   # them naming the field
                         parse_int=lambda d: int(d) if len(d) <= 30 else float(d))
    except json.JSONDecodeError as e:
        raise ProfileError(f"{path}: not valid JSON: {e}") from None
    except RecursionError:
        raise ProfileError(f"{path}: not a calibration file: its JSON is nested too deeply") from None
    return TemperatureTable.from_json(obj, str(path))


def with_fallback(fitted: TemperatureTable, base: TemperatureTable, source: str | None = None) -> TemperatureTable:
    """``fitted`` where it has a temperature, else ``base`` (e.g. the model's own, for a profile fitted on a small
    file): per (type, bucket) the fitted bucket, else the fitted type, else the base's bucket, else the base's
    type, else 1. A type fitted in ``fitted`` drops the base's buckets of that type (the profile's own type
    temperature is the better fallback for them). ``abstain_bias`` goes with the ``abstain`` temperature: the
    fitted one's where ``fitted`` has that entry, else the base's; ``score_readout`` likewise with ``score``'s."""
    by_type = {**base.by_type, **fitted.by_type}
    by_bucket = {k: v for k, v in base.by_bucket.items() if k[0] not in fitted.by_type}
    by_bucket.update(fitted.by_bucket)
    bias = fitted.abstain_bias if "abstain" in fitted.by_type else base.abstain_bias
    readout = fitted.score_readout if "score" in fitted.by_type else base.score_readout
    return TemperatureTable(by_bucket=by_bucket, by_type=by_type, source=source or fitted.source, abstain_bias=bias,
                            score_readout=readout)


# --- fitting (DESIGN.md §9) -------------------------------------------------------------------


T_MIN, T_MAX = 0.05, 20.0
MIN_BUCKET = 200
BOUND_TOLERANCE = 1e-3
"""A fit with ``|log T − log bound| <`` this (about 0.1 % of T) has landed on a search bound (:func:`at_bound`)."""
BIAS_BOUND = 0.99
"""An abstention fit whose ``|bias|`` reaches this share of :data:`BIAS_LIMIT` has landed on the bias bound: the
"cannot tell" and answerable records are separated so far from logit 0 (or perfectly) that the log loss keeps
falling towards the bound (a profile recalibrated on outcomes that all fell on one question gave bias +99.998)."""


def at_bound(t: float, lo: float = T_MIN, hi: float = T_MAX) -> str | None:
    """``"lower"`` or ``"upper"`` when a fitted temperature ``t`` lies on the search bound ``lo`` or ``hi``
    (within :data:`BOUND_TOLERANCE` in log T), else None.

    DESIGN §9 reads a bound hit as "not enough information": the NLL still falls at the edge of the search
    interval, so the fitted value is where the search stopped, not a minimum. Near-separable logits (errors only
    by a hair) drive T to the lower bound; logits unrelated to the gold drive it to the upper one (the uniform
    distribution is the best they allow)."""
    if abs(math.log(t) - math.log(lo)) < BOUND_TOLERANCE:
        return "lower"
    if abs(math.log(t) - math.log(hi)) < BOUND_TOLERANCE:
        return "upper"
    return None


def _bound_note(side: str, t: float) -> str:
    bound = T_MIN if side == "lower" else T_MAX
    return f"fit hit the {side} search bound (T = {bound:g}, fitted {t:.4g}): not enough information"


def nll_at(logits: list, golds: list[int], t: float, readout: str = "softmax") -> float:
    """Mean NLL (nats) of ``softmax(z / t)`` at the gold index, over questions with any K; ``readout="normal"``:
    of :func:`normal_readout` of it (score questions)."""

    total = 0.0
    for z, g in zip(logits, golds):
        z = torch.as_tensor(z, dtype=torch.float64) / t
        if readout == "normal":
            total -= math.log(max(float(normal_readout(torch.softmax(z, -1))[g]), 1e-300))
        else:
            total -= float(torch.log_softmax(z, -1)[g])
    return total / max(len(logits), 1)


def fit_temperature(logits: list, golds: list[int], lo: float = T_MIN, hi: float = T_MAX, iters: int = 60) -> float:
    """The T in [lo, hi] minimising mean NLL of ``softmax(z / T)``: golden-section search over log T
    (NLL is convex in 1/T, so unimodal in log T). ``logits``: one ``[K]`` sequence per question
    (any K); ``golds``: gold indices. Guo et al. 2017, "On Calibration of Modern Neural Networks"."""

    return _golden_section_t(lambda t: nll_at(logits, golds, t), lo, hi, iters)


def _golden_section_t(loss, lo: float, hi: float, iters: int) -> float:
    """The T in [lo, hi] minimising ``loss(T)``, a function unimodal in log T: golden-section search over log T,
    ``iters`` steps, the middle of the last bracket."""
    a, b = math.log(lo), math.log(hi)
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = loss(math.exp(c)), loss(math.exp(d))
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = loss(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = loss(math.exp(d))
    return math.exp((a + b) / 2)


def abstain_nll_at(logits: list[float], cannot_tell: list[bool], t: float, bias: float = 0.0) -> float:
    """Mean binary log loss (nats) of ``x_abstain = sigmoid(a / t + bias)`` against "cannot tell"."""
    a = torch.as_tensor(logits, dtype=torch.float64) / t + bias
    y = torch.as_tensor(cannot_tell, dtype=torch.float64)
    return float(torch.nn.functional.binary_cross_entropy_with_logits(a, y))


def _best_bias(z: torch.Tensor, y: torch.Tensor, iters: int = 80) -> float:
    """The bias ``b`` minimising the mean binary log loss of ``sigmoid(z + b)`` against ``y`` (float64 tensors with
    both classes in ``y``): the root of its derivative ``mean(sigmoid(z + b)) - mean(y)``, which rises with b,
    by bisection within ±:data:`BIAS_LIMIT`."""
    target, lo, hi = float(y.mean()), -BIAS_LIMIT, BIAS_LIMIT
    for _ in range(iters):
        mid = (lo + hi) / 2
        if float(torch.sigmoid(z + mid).mean()) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fit_abstain(logits: list[float], cannot_tell: list[bool], lo: float = T_MIN, hi: float = T_MAX,
                iters: int = 60) -> tuple[float, float]:
    """Platt scaling of the abstention logit: the ``(T, bias)``, T in [lo, hi], minimising
    :func:`abstain_nll_at` (Platt 1999, "Probabilistic outputs for support vector machines"). ``cannot_tell``
    must hold both kinds.

    Logistic log loss is jointly convex in ``(1/T, bias)``, so its minimum over the bias, a function of 1/T, is
    convex too and unimodal in log T: golden-section search over log T (as :func:`fit_temperature`) with the bias
    solved exactly at each T (:func:`_best_bias`). A T on a search bound is reported by :func:`at_bound`.

    Raises:
        ValueError: ``cannot_tell`` empty or all of one kind (no bias is determined).
    """
    y = torch.as_tensor(cannot_tell, dtype=torch.float64)
    if not 0 < float(y.sum()) < len(y):
        raise ValueError("Platt scaling needs both 'cannot tell' and answerable records")
    a_ = torch.as_tensor(logits, dtype=torch.float64)

    def loss(t):
        z = a_ / t
        return float(torch.nn.functional.binary_cross_entropy_with_logits(z + _best_bias(z, y), y))
    t = _golden_section_t(loss, lo, hi, iters)
    return t, _best_bias(a_ / t, y)


def _family(r: dict) -> str:
    """A record's source family: the part of its ``source`` before the first "/"."""
    return str(r.get("source", "")).split("/")[0]


def abstain_records(records: list[dict]) -> list[dict]:
    """The records x_abstain's scaling is fitted on where it is asked (:func:`fit_table`): those with an
    ``abstain_logit`` from the source families that hold "cannot tell" records (the rest, answerable only, would
    pull x_abstain towards their own base rate of 0); every record with a logit when no family holds one."""
    abst = [r for r in records if r.get("abstain_logit") is not None]
    asked = {_family(r) for r in abst if r.get("cannot_tell")}
    return [r for r in abst if _family(r) in asked] if asked else abst


def fit_table(records: list[dict], min_count: int = MIN_BUCKET, source: str = "fitted",
              base: TemperatureTable | None = None, abstain_where_asked: bool = True) -> tuple[TemperatureTable, dict]:
    """Temperatures per (type, K-bucket) from held-out records (``{"type", "logits", "gold"}``), and the
    abstention's Platt scaling (:func:`fit_abstain`: ``by_type["abstain"]`` and ``abstain_bias``) from the records
    that carry ``abstain_logit`` (a model with
    the ``x_abstain`` capability) and come from a source family (``source`` up to its first "/") that has
    "cannot tell" records (``"cannot_tell": true``): fitted when at least ``min_count`` of them are there, with
    both kinds. "Cannot tell" records take no part in the option fits. ``abstain_where_asked=False`` fits the
    abstention on every record that carries a logit instead: a user's own file or served outcomes, whose share of
    unanswerable questions is the one x_abstain should reflect.

    Fallbacks, recorded in the returned report: a bucket with fewer than ``min_count`` questions,
    no errors, or a fit that lands on a search bound (:func:`at_bound`) gets no entry (its type's temperature
    applies); a type in one of those cases gets none either: then ``base``'s temperatures apply
    (:func:`with_fallback`; a calibration profile passes the model's own), or T = 1 without a ``base``.

    The report: ``{"min_count", "bounds": [T_MIN, T_MAX], "bound_hits": ["TYPE" or "TYPE/BUCKET", ...],
    "types": {type: entry}, "buckets": {"TYPE/BUCKET": entry}}``; an entry has ``n``, ``errors`` and either
    ``temperature`` or ``fallback`` (why, in words); a bound hit adds ``bound`` (``"lower"``/``"upper"``) and
    ``fitted_at_bound`` (the value the search stopped at, not served).
    """

    abst = abstain_records(records) if abstain_where_asked else \
        [r for r in records if r.get("abstain_logit") is not None]
    records = [r for r in records if not r.get("cannot_tell")]
    groups, types = defaultdict(list), defaultdict(list)
    for r in records:
        groups[(r["type"], bucket_of(len(r["logits"])))].append(r)
        types[r["type"]].append(r)

    def errors(rs):
        return sum(1 for r in rs if max(range(len(r["logits"])), key=lambda k: r["logits"][k]) != r["gold"])

    readout = base.score_readout if base is not None else "softmax"

    by_type, by_bucket = {}, {}
    report = {"min_count": min_count, "bounds": [T_MIN, T_MAX], "bound_hits": [], "types": {}, "buckets": {}}
    for t, rs in sorted(types.items()):
        z, g = [r["logits"] for r in rs], [r["gold"] for r in rs]
        entry = {"n": len(rs), "errors": errors(rs), "nll_t1": nll_at(z, g, 1.0)}
        why = "too few questions or no errors"
        if len(rs) >= min_count and entry["errors"]:
            fitted = fit_temperature(z, g)
            side = at_bound(fitted)
            if side is None:
                by_type[t] = fitted
                entry.update(temperature=fitted, nll_fitted=nll_at(z, g, fitted))
            else:
                why = _bound_note(side, fitted)
                entry.update(bound=side, fitted_at_bound=fitted)
                report["bound_hits"].append(t)
        if "temperature" not in entry:
            entry["fallback"] = f"the model's own temperatures ({why})" if base is not None else f"T = 1 ({why})"
        if t == "score" and len(rs) >= min_count and entry["errors"]:
            readout = _fit_score_readout(entry, z, g, by_type, report, base)
        report["types"][t] = entry
    for (t, b), rs in sorted(groups.items()):
        z, g = [r["logits"] for r in rs], [r["gold"] for r in rs]
        entry = {"n": len(rs), "errors": errors(rs)}
        if t == "score" and readout == "normal":   # no per-bucket softmax temperature under the normal readout
            entry["fallback"] = ("type score's temperature" if "score" in by_type else
                                 "the model's own score temperature") + (
                " (two levels: read by softmax)" if b == "2" else
                " (fitted under the normal readout)" if "score" in by_type else " and normal readout")
        elif len(rs) >= min_count and entry["errors"]:
            fitted = fit_temperature(z, g)
            side = at_bound(fitted)
            if side is None:
                by_bucket[(t, b)] = fitted
                entry["temperature"] = fitted
            else:
                entry.update(bound=side, fitted_at_bound=fitted)
                report["bound_hits"].append(f"{t}/{b}")
        if "temperature" not in entry and "fallback" not in entry:
            entry["fallback"] = (f"type {t}'s temperature" if t in by_type else
                                 f"the model's own temperature (T = {base.lookup(t, _bucket_k(b)):.3g})"
                                 if base is not None else "T = 1")
            if "bound" in entry:
                entry["fallback"] += f" ({_bound_note(entry['bound'], entry['fitted_at_bound'])})"
        report["buckets"][f"{t}/{b}"] = entry
    bias = 0.0
    if abst:
        a, y = [r["abstain_logit"] for r in abst], [bool(r.get("cannot_tell")) for r in abst]
        entry = {"n": len(abst), "cannot_tell": sum(y), "nll_t1": abstain_nll_at(a, y, 1.0)}
        why = "too few questions, or not both \"cannot tell\" and answerable ones"
        if not all(math.isfinite(x) for x in a):
            why = "an abstention logit is not a finite number"
        elif len(set(a)) < 2:
            why = "all abstention logits are equal: they rank nothing, so no slope is determined"
        elif len(abst) >= min_count and 0 < sum(y) < len(y):
            t, b = fit_abstain(a, y)
            side = at_bound(t)
            if side is None and abs(b) >= BIAS_BOUND * BIAS_LIMIT:
                why = (f"fit hit the bias bound ({b:+g}, fitted T = {t:.4g}): not enough information (the two "
                       f"kinds are separated far from logit 0)")
                entry.update(bound="bias", fitted_at_bound=t, bias_at_bound=b)
                report["bound_hits"].append("abstain")
            elif side is None:
                by_type["abstain"], bias = t, b
                entry.update(temperature=t, bias=b, nll_fitted=abstain_nll_at(a, y, t, b))
            else:
                why = _bound_note(side, t)
                entry.update(bound=side, fitted_at_bound=t)
                report["bound_hits"].append("abstain")
        if "temperature" not in entry:
            entry["fallback"] = ("the model's own scaling" if base is not None else "T = 1, bias 0") + f" ({why})"
        report["types"]["abstain"] = entry
    table = TemperatureTable(by_bucket=by_bucket, by_type=by_type, source=source, abstain_bias=bias,
                             score_readout=readout)
    return (table if base is None else with_fallback(table, base)), report


def _fit_score_readout(entry: dict, z: list, g: list[int], by_type: dict, report: dict,
                       base: TemperatureTable | None = None) -> str:
    """Fit the score temperature under :func:`normal_readout` too and keep whichever readout has the lower
    NLL; updates ``entry`` (the winner's ``temperature`` and ``nll_fitted``, ``readout``, and the other's figures
    under ``softmax`` or ``normal``) and ``by_type["score"]``. Returns the readout to serve.

    Softmax is judged at its fitted temperature; where its fit fell back, at what would be served instead (``base``'s
    temperatures and readout, or T = 1). A normal fit on a search bound is not usable. Where neither readout has a
    usable fit, the readout served so far (``base``'s, or softmax) stays, with its temperature."""
    t_n = _golden_section_t(lambda t: nll_at(z, g, t, "normal"), T_MIN, T_MAX, 60)
    qs = [normal_readout(torch.softmax(torch.as_tensor(x, dtype=torch.float64) / t_n, -1)) for x in z]
    nll_n = sum(-math.log(max(float(q[y]), 1e-300)) for q, y in zip(qs, g)) / len(z)     # nll_at(z, g, t_n, "normal")
    acc_n = sum(int(q.argmax()) == y for q, y in zip(qs, g)) / len(z)
    normal = {"temperature": t_n, "nll_fitted": nll_n, "accuracy": acc_n}
    if "temperature" in entry:
        soft_nll = entry["nll_fitted"]
    elif base is not None:
        soft_nll = sum(-math.log(max(float(base.probabilities("score", torch.as_tensor(x, dtype=torch.float64))[y]),
                                     1e-300)) for x, y in zip(z, g)) / len(z)
    else:
        soft_nll = entry["nll_t1"]
    inherited = base.score_readout if base is not None else "softmax"
    if (side := at_bound(t_n)) is not None:
        normal["bound"] = side
    if side is not None or nll_n >= soft_nll:
        entry.update(readout="softmax" if "temperature" in entry else inherited, normal=normal)
        return entry["readout"]
    soft = {k: entry.pop(k) for k in ("temperature", "nll_fitted", "bound", "fitted_at_bound", "fallback")
            if k in entry}
    if "score" in report["bound_hits"]:
        report["bound_hits"].remove("score")
    entry.update(readout="normal", softmax=soft, temperature=t_n, nll_fitted=nll_n, accuracy_readout=acc_n)
    by_type["score"] = t_n
    return "normal"


def fit_line(name: str, entry: dict) -> str:
    """One line of a :func:`fit_table` report's type entry, as ``calibrate`` prints it, e.g. ``noul: n=272
    errors=80, NLL at T=1 0.6123 -> 0.5981 at T=1.320`` or ``abstain: n=341 cannot tell=106, NLL at T=1 0.6254 ->
    0.3120 at T=1.007, bias +2.857``; a fallback is named instead of the fit."""
    counts = f"n={entry['n']}" + (f" errors={entry['errors']}" if "errors" in entry else "") \
        + (f" cannot tell={entry['cannot_tell']}" if "cannot_tell" in entry else "") \
        + (f" accuracy {entry['accuracy']:.3f}" if "accuracy" in entry else "")
    fit = (f" -> {entry['nll_fitted']:.4f} at T={entry['temperature']:.3f}"
           + (f", bias {entry['bias']:+.3f}" if "bias" in entry else "")) if "temperature" in entry \
        else f" ({entry['fallback']})"
    if "softmax" in entry:                        # the normal readout won the fit
        soft = entry["softmax"]
        fit += (f", normal readout (accuracy {entry['accuracy_readout']:.3f}; softmax: "
                + (f"NLL {soft['nll_fitted']:.4f} at T={soft['temperature']:.3f})" if "temperature" in soft
                   else f"{soft.get('fallback', 'T = 1')})"))
    elif "normal" in entry:                       # it lost, or its fit is not usable: the readout served says so
        n = entry["normal"]
        fit += (f", {entry['readout']} readout{'' if 'temperature' in entry else ' kept'} (normal: NLL "
                f"{n['nll_fitted']:.4f}"
                + (f", at the {n['bound']} search bound" if "bound" in n else "") + ")")
    return f"{name}: {counts}, NLL at T=1 {entry['nll_t1']:.4f}{fit}"


def bound_hits_text(report: dict | None) -> str | None:
    """One line naming the fits of a :func:`fit_table` report (or a calibration file's ``fit``) that landed on a
    search bound and fell back, e.g. ``temperature at a search bound, fell back: noul (upper), choice/3-5
    (lower)``; None when there are none (or no report)."""
    if not isinstance(report, dict):
        return None
    hits = []
    for key in report.get("bound_hits") or ():
        entry = (report.get("buckets") if "/" in key else report.get("types") or {}).get(key) or {}
        hits.append(f"{key} ({entry.get('bound', '?')})")
    return f"temperature at a search bound, fell back: {', '.join(hits)}" if hits else None


def _bucket_k(label: str) -> int:
    """An option count inside bucket ``label`` (its lower end)."""
    return int(label.split("-")[0].rstrip("+"))
