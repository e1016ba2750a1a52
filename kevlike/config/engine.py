"""The engine's settings: how a model is loaded and how it reads and answers requests (:class:`EngineOptions`).

``Engine.from_pretrained``, ``Engine``, ``kevlike serve`` (:class:`kevlike.config.server.ServerConfig`), the
evaluation suites and the tools take one :class:`EngineOptions`; the command line generates its
``--dtype``, ``--quantize``, ``--threads``, ``--option-mode``, ``--option-orders``, ``--script-policy``,
``--profile``, ``--state-cache-mb``, ``--abstain-above``, ``--p-right-below`` and ``--max-options`` from its fields.
"""

from __future__ import annotations

import os
import re

from kevlike.config.fields import argparse_type, leaves, parse_text
from kevlike.config.limits import DEFAULT_LIMITS, Limits
from kevlike.config.rules import Rule, Section, SettingError, is_int, number, one_of, setting, settings

MODES = ("packed", "separate")
"""How a request is run: ``packed`` (one forward pass, the product) or ``separate`` (one pass per question, the
reference path the packed one is tested against)."""

PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""A calibration profile's name (its file is ``NAME.json``): no path separator, no leading dot."""


PROFILE_NAME_RULE = "1-64 letters, digits, '_', '.' or '-' (not first)"
""":data:`PROFILE_NAME` in words, for messages."""


def check_profile_name(name: str) -> str:
    """Validate a profile name (letters, digits, ``_ . -``, 1-64 characters, not starting with a
    punctuation mark) and return it.

    Raises:
        ValueError: any other name.
    """
    if not isinstance(name, str) or not PROFILE_NAME.match(name):
        raise ValueError(f"profile name must be {PROFILE_NAME_RULE}, got {name!r}")
    return name


DTYPE_CHOICES = ("auto", "float32", "bfloat16")
"""Weight precisions (``auto``: :func:`kevlike.model.backbones.resolve_dtype`)."""

QUANTIZE_CHOICES = ("none", "auto", "int8")
"""Quantization settings (:func:`kevlike.model.quantize.resolve_quantize`)."""

OPTION_MODES = ("list", "set")
"""How a choice question's options are read by the pointer readout (see
:meth:`kevlike.request.encode.Encoder.encode`): ``list`` — one after another in one branch (each option reads
the ones before it); ``set`` — each option in its own sub-branch that sees the state, the question and itself
only."""

SCRIPT_POLICIES = ("annotate", "refuse")
"""What the engine does with a state in a script its model was not trained on
(:mod:`kevlike.request.writing_systems`)."""

MAX_OPTION_ORDERS = 24
"""The most option orders (``option_orders``) a choice question may be read in. Each order is one
more branch per choice question in the same forward pass (M orders cost M× the choice branches'
tokens), and distinct orders run out at K! for K options (6 options: 720), so an unbounded value
turns one request into minutes of CPU time. 24 = 4! reads every order of up to 4 options; pooling
more orders changes the answers little (docs/guide/options.md, "Option order")."""

MAX_STATE_CACHE_MB = 2 ** 30
"""The largest ``state_cache_mb`` (1 PiB): a bound that keeps the cap a finite number of bytes."""

MAX_THREADS = 256


THREADS = Rule("custom", says=f"'auto' or an integer from 1 to {MAX_THREADS}",
               test=lambda v: v == "auto" or (is_int(v) and 1 <= v <= MAX_THREADS))
"""``threads``: ``"auto"`` or an integer from 1 to :data:`MAX_THREADS`."""
check_threads = THREADS.problem   # threads value -> "must be ..." when refused, else None


def _orders(v) -> bool | str:
    if is_int(v) and v < 0:
        return ">= 0"
    if is_int(v) and v > MAX_OPTION_ORDERS:
        return f"at most {MAX_OPTION_ORDERS} (each order is one more branch per choice question in the forward pass)"
    return is_int(v)


@settings(terse=True)
class EngineOptions(Section):
    """How an engine (:class:`kevlike.model.engine.Engine`) is loaded and answers; each field's help text, choices
    and rule are its field's (:func:`kevlike.config.rules.setting`). None: the model's own
    (``option_mode``, ``option_orders``: from its manifest; ``profile``: its own temperatures) or, for
    ``threads``, ``KEVLIKE_THREADS`` else auto. ``dtype``, ``quantize`` and ``profile`` act when a model is loaded.

    Attributes:
        option_orders: the orders each choice question is read in by the pointer readout
            (:func:`kevlike.request.encode.option_orders`): 1 a canonical order, so answers do not depend on the
            order a request lists the options in; M ≥ 2 pools M orders (M× the choice branches' tokens); 0 the
            request's order. At most :data:`MAX_OPTION_ORDERS`. The LM readout is order-free already.
        option_mode: ``list`` or ``set`` (:data:`OPTION_MODES`); in set mode adding, removing or reordering
            options leaves the others' logits unchanged and ``option_orders`` does not apply.
        threads: torch's intra-op threads on the CPU: ``"auto"`` (:mod:`kevlike.model.threads`) or N.
        state_cache_mb: MiB of state keys/values kept between requests (:mod:`kevlike.model.state_cache`; 0 off);
            responses then carry ``x_cached_tokens``. Pointer readout without sliding-window layers only.
        script_policy: ``annotate`` (responses report the state's script) or ``refuse`` (also a 422 for a script
            the model was not trained on; :mod:`kevlike.request.writing_systems`).
        abstain_above: answers of a model with ``x_abstain`` above it also carry ``"x_abstained": true`` (a
            request's ``x_abstain_above`` overrides it); the Jev fields stay.
        p_right_below: answers of a model with ``x_abstain`` whose P(right) ``= (1 − x_abstain) · max_k p_k`` is
            below it also carry ``"x_abstained": true`` (a request's ``x_p_right_below`` overrides it): abstain when
            the answer is likely wrong, not only when the text leaves it open (:func:`kevlike.metrics.p_right`).
        limits: the request limits.

    Raises:
        kevlike.config.rules.SettingError: a refused value, naming the field (``option_orders must be >= 0, got
            -1``), or ``quantize`` int8 with ``dtype`` bfloat16.
    """

    dtype: str = setting(
        "auto", one_of(DTYPE_CHOICES), "weight precision: auto takes $KEVLIKE_DTYPE if set, else picks bfloat16 on "
        "CUDA and on CPUs with bf16 matrix units (AMX, AVX512-BF16), float32 elsewhere; float32 is the tested "
        "reference")
    quantize: str = setting(
        "none", one_of(QUANTIZE_CHOICES), "int8: SmoothQuant smoothing, then dynamic int8 in the decoder's Linear "
        "layers but down_proj (CPU, from float32 weights; 1.3-1.5x faster on an AVX2 CPU, accuracy -0.011 on 650 "
        "questions: see the int8 section of docs/guide/benchmark.md); auto: int8 where the weights are float32 on the "
        "CPU (not on CUDA nor where --dtype auto picks bfloat16); none: no quantization")
    threads: int | str | None = setting(
        None, THREADS, "torch threads on the CPU: 'auto' uses the cores other processes leave free (measured, at most "
        "once a second), N a fixed count (default: $KEVLIKE_THREADS, else auto)",
        parse=lambda t: t if t == "auto" else int(t))
    option_mode: str | None = setting(
        None, one_of(OPTION_MODES), "how a choice question's options are read: list (one after another in one "
        "branch) or set (each option its own sub-branch: no option sees another, so adding, removing or reordering "
        "options leaves the others' log-odds unchanged){note} (default: {whose})", words={"whose": "the model's"})
    option_orders: int | None = setting(
        None, Rule("custom", says=f"an integer from 0 to {MAX_OPTION_ORDERS}", test=_orders), f"orders each choice "
        f"question's options are read in, 0 to {MAX_OPTION_ORDERS}: 1 canonical, M>=2 pooled (M x the choice "
        f"branches' tokens), 0 as listed{{note}} (default: {{whose}})", metavar="M", words={"whose": "the model's"})
    script_policy: str = setting(
        "annotate", one_of(SCRIPT_POLICIES), "a state in a script the model was not trained on: annotate (report it "
        "in the response) or refuse it")
    profile: str | None = setting(
        None, Rule("custom", says="a profile name", test=lambda v: isinstance(v, str)), "answer with the "
        "temperatures of this calibration profile (kevlike calibrate --profile; default: the model's own)",
        metavar="NAME")
    state_cache_mb: float = setting(
        0.0, number(0, MAX_STATE_CACHE_MB, says=f"a number of MiB from 0 to {MAX_STATE_CACHE_MB} (0 turns it off)"), "MiB of state keys/values kept per model "
        "between requests: a request whose state (or a prefix of it) was seen recently runs only its questions; 0 "
        "turns it off (models without a pointer head or with sliding-window layers are loaded without it)",
        parse=float, metavar="MB")
    abstain_above: float | None = setting(
        None, number(0, 1, says="a probability from 0 to 1"), "models with x_abstain: answers whose x_abstain is "
        "above P also carry \"x_abstained\": true; a request's x_abstain_above overrides it (the Jev fields stay; "
        "docs/guide/abstention.md; default: none, no x_abstained)", metavar="P")
    p_right_below: float | None = setting(
        None, number(0, 1, says="a probability from 0 to 1"), "models with x_abstain: answers whose P(right) = "
        "(1 - x_abstain) * top option's probability is below P also carry \"x_abstained\": true, so a likely wrong "
        "answer abstains too; a request's x_p_right_below overrides it (docs/guide/abstention.md; default: none)",
        metavar="P")
    limits: Limits = DEFAULT_LIMITS

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.limits, Limits):
            raise SettingError("limits", f"must be a Limits, got {self.limits!r}")
        if self.quantize == "int8" and self.dtype == "bfloat16":
            raise SettingError("quantize", "int8 quantizes float32 weights; drop {dtype} bfloat16 (or {quantize})",
                               ("dtype", "quantize"))


DEFAULT_OPTIONS = EngineOptions()


def threads_from_env(environ=None) -> int | str:
    """``KEVLIKE_THREADS`` (``auto`` or N; unset: ``auto``): what ``threads=None`` means.

    Raises:
        ValueError: any other value (the message names the variable).
    """
    raw = (os.environ if environ is None else environ).get("KEVLIKE_THREADS", "auto").strip()
    return parse_text(leaves(DEFAULT_OPTIONS)["threads"][0], raw, "KEVLIKE_THREADS")


parse_threads = argparse_type(leaves(DEFAULT_OPTIONS)["threads"][0])
"""``--threads`` as an argparse ``type`` for scripts: ``"auto"`` or an integer from 1 to 256."""
