"""The engine: a request in, Jev answers out, in one packed forward pass (DESIGN.md §2).

    request → schema.validate → encode → pack → kernels mask → backbone → readout → z / T → answers

Readouts: a trained decision model answers with its pointer head; a bare backbone answers with the
training-free LM readout (mean log-probability of each option's answer text).
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch

from kevlike.config.engine import DEFAULT_OPTIONS, MAX_OPTION_ORDERS, MODES, EngineOptions  # noqa: F401 (re-exported)
from kevlike.config.rules import is_int
from kevlike.model.backbones import DEFAULT_MODEL, resolve_dtype, resolve_model
from kevlike.model.heads import PointerHead, pool_abstain, pool_orders, readout_for
from kevlike.model.kernels import attention_inputs, check_backend, default_backend
from kevlike.model.modeldir import (
    ABSTAIN, ModelDir, check_profile_name, ensure_embedding_rows, existing_profile_path, load_profile, load_temperatures
)
from kevlike.model.merged import load_weights
from kevlike.model.quantize import quantize_int8, resolve_quantize
from kevlike.model.state_cache import StateCache, cached_branch_outputs
from kevlike.model.temperatures import TemperatureTable
from kevlike.model.threads import ThreadPolicy
from kevlike.request.answers import Decision, answer, thresholds  # noqa: F401 (Decision re-exported)
from kevlike.request.encode import EncodedRequest, Encoder, option_orders
from kevlike.request.pack import pack
from kevlike.request.render import render_text
from kevlike.request.schema import (
    DEFAULT_LIMITS, Limits, Question, Request, RequestError, parse_request, prepare_each, validate_request
)
from kevlike.request.writing_systems import ScriptReport, detect_script


JEV_MAX_OPTIONS = 255
"""Jev's limit on a choice question's options. Beyond it (``Limits.max_options``, ``--max-options``) a
question is answered in one set-mode pass when it fits the token budget, else by shortlist-then-decide
(:class:`ShortlistPlan`)."""

SHORTLIST_SIZE = 64
"""Options kept by the first stage of shortlist-then-decide (``M``)."""

SHORTLIST_CHUNK = 256
"""Options per branch in the first stage of shortlist-then-decide."""


@dataclass(frozen=True)
class Prepared:
    """One request made ready for a forward pass by :meth:`Engine.prepare` (cheap, no forward pass):
    ``request`` validated, ``encoded`` its token ids (or, beyond Jev's 255 options, a
    :class:`ShortlistPlan`), ``script`` the writing system of its state (reported in ``x_input``).
    The server's batcher budgets a batch by ``n_tokens``."""

    request: Request
    encoded: Any
    script: ScriptReport

    @property
    def n_tokens(self) -> int:
        return self.encoded.n_tokens


@dataclass
class ShortlistPlan:
    """Shortlist-then-decide for a request with a choice question of more than :data:`JEV_MAX_OPTIONS`
    options that cannot be answered in one pass (DESIGN §5, "Set mode"):

    1. **score**: every option of each such question, in chunks of :data:`SHORTLIST_CHUNK` options, each
       chunk one branch ``<q> instructions <decide>`` with the options as set-mode sub-branches; branches
       share the state and are packed into as few passes as the token budget allows (``passes``). In set
       mode an option's logit does not depend on its siblings, so chunking changes nothing but rounding.
    2. **shortlist**: the ``shortlist`` options with the highest logits;
    3. **decide**: the request again with each such question cut to its shortlist, in the engine's option
       mode, one packed pass with the other questions.

    The answer's probabilities: the first stage's distribution ``p₁ = softmax(z / T)`` over all options
    (T: the ``choice`` temperature of the ``256+`` bucket in set mode), with the shortlist's mass
    redistributed by the second stage: ``p(o) = p₁(shortlist) · p₂(o)`` for a shortlisted option and
    ``p₁(o)`` otherwise — so every option keeps a probability and they sum to 1. The response reports the
    shortlist size per question in ``x_shortlist``.

    ``passes``: stage-1 encoded requests; ``slots[i]`` lists, for pass i, ``(question, first option)``
    per branch; ``n_tokens``: the stage-1 tokens (what the batcher budgets).
    """

    request: Request
    questions: tuple[int, ...]
    passes: list
    slots: list
    shortlist: int = SHORTLIST_SIZE

    @property
    def n_tokens(self) -> int:
        return sum(e.n_tokens for e in self.passes)


def as_request(request: Any, limits: Limits = DEFAULT_LIMITS) -> Request:
    """Accept a validated :class:`Request`, a decoded JSON object, or raw JSON text/bytes.

    Raises:
        RequestError: the request violates the wire format.
    """
    if isinstance(request, Request):
        return request
    if isinstance(request, (str, bytes)):
        return parse_request(request, limits)
    return validate_request(request, limits)


def backbone_hidden(model, backend: str, input_ids: torch.Tensor, segment_ids: torch.Tensor,
                    position_ids: torch.Tensor, option_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The stock decoder body (no LM head) under the packed mask: ``[B, L]`` ids -> hidden ``[B, L, d]``.
    Shared by serving (:class:`Engine`) and training, so both run exactly the same mask and positions.
    ``model`` is an HF causal LM (possibly with LoRA layers injected by peft)."""
    extra = attention_inputs(backend, model.config, segment_ids, position_ids, option_ids)
    out = model.get_decoder()(input_ids=input_ids, position_ids=position_ids, use_cache=False, **extra)
    return out.last_hidden_state


def softmax_order_free(question: Question, z: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``softmax(z / temperature)`` ``[K]`` of one question's logits ``z`` ``[K]`` (request option order),
    computed with the options in their canonical order (:func:`kevlike.request.encode.option_orders`) for a
    choice question and permuted back: the sum inside the softmax then runs in the same order whatever
    order the request lists the options in, so reordering leaves the probabilities bit-identical on
    every CPU (vectorised reductions round differently by position)."""
    if question.type != "choice":
        return torch.softmax(z / temperature, dim=-1)
    order = torch.tensor(option_orders(question, 1)[0])
    return torch.empty_like(z).index_copy_(0, order, torch.softmax(z[order] / temperature, dim=-1))


def state_cache_refusal(model, readout) -> str | None:
    """Why an engine of ``model`` with ``readout`` cannot keep a state cache (the LM readout, sliding-window
    attention layers), or None when it can."""
    if not readout.state_cache:
        return "the state cache serves the pointer readout; this model has none (LM readout)"
    if sliding_window(model):
        return "the state cache does not support sliding-window attention layers (this backbone has them)"
    return None


def sliding_window(model) -> bool:
    """Whether ``model``'s backbone has sliding-window attention layers."""
    return bool(getattr(model.config, "use_sliding_window", False)
                or "sliding_attention" in (getattr(model.config, "layer_types", None) or ()))


def _manifest_count(manifest: dict, key: str, default: int, most: int, model: str) -> int:
    """The integer setting ``key`` of a model's ``kevlike.json`` (``default`` where absent), from 0 to ``most``.

    Raises:
        ValueError: any other value (null, a string, a float, a bool), naming the model, the field and the range
            (before: ``int(None)`` was a traceback and ``1.7`` silently 1).
    """
    v = manifest.get(key, default)
    if not is_int(v) or not 0 <= v <= most:
        raise ValueError(f"model {model!r}: kevlike.json field {key!r} must be an integer from 0 to {most}, got "
                         f"{json.dumps(v)[:40]} (fix the file, or override it with --{key.replace('_', '-')})")
    return v


class Engine:
    """Answers typed questions about a state.

    Args:
        model: a Hugging Face causal LM (Llama, Qwen2, …) in eval mode.
        tokenizer: its tokenizer (the delimiter tokens are added to it).
        options: how it reads and answers (:class:`kevlike.config.engine.EngineOptions`, where each field is
            described and checked); ``settings`` replace single fields, e.g. ``Engine(model, tok, option_mode="set")``.
            Here ``option_orders`` None means 1 and ``option_mode`` None ``"list"``; ``dtype``, ``quantize`` and
            ``profile`` act when a model is loaded (:meth:`from_pretrained`). ``thread_policy``: an already made
            :class:`ThreadPolicy` instead of ``options.threads``.
        name: the model name reported in responses.
        head: a trained :class:`PointerHead`; ``None`` selects the training-free LM readout.
        temperatures: per (type, K-bucket) temperatures; default all 1.
        backend: ``"kevlike_packed"`` (block-sparse CPU kernel, no mask), ``"sdpa"`` (dense bool mask) or
            ``"flex_attention"`` (BlockMask); default by device (see :mod:`kevlike.model.kernels.attention`).
        scripts: the scripts the model was trained on (``kevlike.json`` ``scripts``); None = unknown.
        lm_abstain: with ``head`` None, also read ``x_abstain`` from the LM readout's none answer
            (:class:`kevlike.model.heads.LMReadout`; a manifest with ``"readout": "lm"`` and the capability).

    Raises:
        kevlike.config.rules.SettingError: a refused setting (a ``ValueError`` naming the field).
        ValueError: an unknown backend, ``kevlike_packed`` off the CPU, or a state cache the model cannot keep
            (:func:`state_cache_refusal`).
    """

    def __init__(self, model, tokenizer, options: EngineOptions = DEFAULT_OPTIONS, *, name: str = DEFAULT_MODEL,
                 head: PointerHead | None = None, temperatures: TemperatureTable | None = None,
                 backend: str | None = None, scripts=None, thread_policy: ThreadPolicy | None = None,
                 lm_abstain: bool = False, **settings):
        options = replace(options, **settings) if settings else options
        option_mode = options.option_mode or "list"
        self.option_orders = 1 if options.option_orders is None else options.option_orders
        self.abstain_above = options.abstain_above
        self.p_right_below = options.p_right_below
        self.option_mode = option_mode
        self.readout = readout_for(head, lm_abstain)
        self.sliding_window = sliding_window(model)
        if options.state_cache_mb and (refusal := state_cache_refusal(model, self.readout)) is not None:
            raise ValueError(refusal)
        self.state_cache = StateCache(options.state_cache_mb) if options.state_cache_mb else None
        self.thread_policy = thread_policy or ThreadPolicy.from_env(options.threads)
        self.model = model
        self.name = name
        self.temperatures = temperatures or TemperatureTable()
        self.device = next(model.parameters()).device
        self.backend = check_backend(backend or default_backend(self.device))  # never eager (DESIGN §6)
        current = getattr(model.config, "_attn_implementation", None)
        if self.backend == "kevlike_packed" and self.device.type != "cpu":
            raise ValueError(f"backend 'kevlike_packed' is a CPU kernel; on {self.device.type} use flex_attention or sdpa")
        if current != self.backend and current != "kevlike_packed":
            # a model set to kevlike_packed runs the sdpa and flex masks too (kevlike/model/kernels/block_sparse.py), so
            # engines of several backends can share one model (kevlike bench)
            model.set_attn_implementation(self.backend)
        self.artifact_dir = None      # from_pretrained: the decision-model directory (its calibration profiles)
        self.profile = None           # the calibration profile whose temperatures are served (with_profile)
        # the modes this model answers in (from_pretrained: its manifest's option_modes)
        self.option_modes = tuple(dict.fromkeys(("list", option_mode, self.readout.layout(option_mode))))
        self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.dtype_reason = "the given model's weights"  # from_pretrained: why auto chose it
        self.encoder = Encoder(tokenizer, getattr(model.config, "max_position_embeddings", None), options.limits,
                               option_orders=self.option_orders, option_mode=option_mode)
        if head is not None:
            ensure_embedding_rows(model, len(tokenizer))
        self.limits = options.limits
        self.scripts = None if scripts is None else frozenset(scripts)
        self.script_policy = options.script_policy

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike | None = None, options: EngineOptions = DEFAULT_OPTIONS,
                        *, device: str | torch.device | None = None, backend: str | None = None,
                        **settings) -> "Engine":
        """Load a registered model name (default ``kevlike-default``), a decision-model directory, or
        any HF causal-decoder directory. The embedded backbone is set up on first use.

        ``options`` (:class:`kevlike.config.engine.EngineOptions`; ``settings`` replace single fields, e.g.
        ``Engine.from_pretrained(name, dtype="float32")``), beyond what :class:`Engine` says of them:
        ``option_orders`` None takes the artifact's ``option_orders`` (the setting its temperatures were fitted
        with; 1 when the manifest has none). ``option_mode`` None takes the manifest's ``option_mode``
        (``"list"`` when it has none); a decision model answers only in the modes its manifest lists in
        ``option_modes`` (``["list"]`` when absent: it was never trained on the set template). ``threads``
        ``auto``: the model load is the first window in which the CPU use of other processes is measured.
        ``quantize``: ``"none"``, ``"int8"`` (:func:`kevlike.model.quantize.quantize_int8`; CPU, float32 only —
        ``dtype="auto"`` then means float32; applied after the LoRA adapter is merged) or ``"auto"`` (int8 where
        the weights are float32 on the CPU: :func:`kevlike.model.quantize.resolve_quantize`). ``profile``: serve
        the temperatures of this calibration profile (``kevlike calibrate --data FILE --profile NAME``) instead of
        the model's own; the engine is then named ``MODEL@NAME``. ``state_cache_mb``: a model that cannot keep a
        state cache (:func:`state_cache_refusal`) is loaded without one.

        An ensemble (a name or directory of :mod:`kevlike.model.ensemble`) loads as an
        :class:`~kevlike.model.ensemble.EnsembleEngine`, which answers like an engine.

        Raises:
            kevlike.model.backbones.ModelNotFoundError: unknown name or path.
            ValueError: a refused setting (before any weights load), an unknown backend, int8 off the CPU, an
                option mode the model was not trained for, an unknown profile (or one given for a model without a
                pointer head), or the artifact's ``option_orders`` outside ``[0, MAX_OPTION_ORDERS]``.
        """
        options = replace(options, **settings) if settings else options
        if options.profile is not None:
            check_profile_name(options.profile)
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        backend = check_backend(backend or default_backend(device))  # before loading any weights
        # int8 quantizes float32 weights, whatever auto would pick
        dtype, dtype_reason = resolve_dtype("float32" if options.quantize == "int8" and options.dtype == "auto"
                                            else options.dtype, device)
        quantize, quantize_reason = resolve_quantize(options.quantize, device, dtype)
        policy = ThreadPolicy.from_env(options.threads)
        resolved = resolve_model(name_or_path)
        if resolved.backbone_dir is None:     # an ensemble: its members load with these options
            from kevlike.model.ensemble import EnsembleEngine
            return EnsembleEngine.from_dir(resolved.artifact_dir, options, load=cls.from_pretrained, name=resolved.name,
                                           device=device, backend=backend)
        if options.profile is not None:
            if resolved.artifact_dir is None:
                raise ValueError(f"model {resolved.name!r} has no pointer head; calibration profiles are for decision models")
            existing_profile_path(resolved.artifact_dir, resolved.name, options.profile)
        model, tok, head, temperatures = load_weights(resolved.artifact_dir, resolved.backbone_dir, dtype, backend,
                                                      device)
        manifest = None
        if resolved.artifact_dir is not None:
            manifest = ModelDir(resolved.artifact_dir).manifest()
            options = replace(options, option_orders=_manifest_count(manifest, "option_orders", 1, MAX_OPTION_ORDERS,
                                                                     resolved.name)
                              if options.option_orders is None else options.option_orders,
                              option_mode=options.option_mode or manifest.get("option_mode", "list"))
            modes = manifest.get("option_modes", ["list"])
            if options.option_mode not in modes:
                raise ValueError(f"model {resolved.name!r} was trained for option mode(s) {', '.join(modes)}, "
                                 f"not {options.option_mode!r}")
        if options.state_cache_mb and state_cache_refusal(model, readout_for(head)) is not None:
            options = replace(options, state_cache_mb=0.0)
        lm_abstain = (manifest is not None and manifest.get("readout") == "lm"
                      and ABSTAIN in manifest.get("capabilities", []))
        engine = cls(model, tok, options, name=resolved.name, head=head, temperatures=temperatures, backend=backend,
                     scripts=None if manifest is None else manifest.get("scripts"), thread_policy=policy,
                     lm_abstain=lm_abstain)
        if manifest is not None:
            engine.option_modes = tuple(modes)
        engine.dtype_reason = dtype_reason if quantize_reason == "quantize none" else f"{dtype_reason}; {quantize_reason}"
        engine.artifact_dir = resolved.artifact_dir
        if options.profile is not None:
            engine = engine.with_profile(options.profile)
        if quantize == "int8":
            n = quantize_int8(engine)
            engine.dtype, engine.dtype_reason = "int8", (f"{quantize_reason}: dynamic int8 in {n} Linear layers after "
                                                         f"SmoothQuant smoothing, down_proj float32 ({dtype_reason})")
        return engine

    def describe(self) -> str:
        """What produces this engine's answers, in one line: precision (and why), option mode and orders,
        readout and calibration profile, e.g. ``float32 [auto: ...], option mode list, 1 option order, readout
        pointer + x_abstain, profile ops``. ``kevlike decide --timing`` prints it; ``kevlike serve`` logs it per
        model."""
        orders = f"{self.option_orders} option order{'' if self.option_orders == 1 else 's'}"
        profile = self.profile or "none (the model's own temperatures)"
        return (f"{self.dtype} [{self.dtype_reason}], option mode {self.option_mode}, {orders}, "
                f"readout {self.readout.name}{' + x_abstain' if self.abstain else ''}, profile {profile}")

    def with_profile(self, profile: str) -> "Engine":
        """An engine sharing this one's model, tokenizer, head and state cache, with the temperatures of
        calibration profile ``profile`` and the name ``{name}@{profile}``.

        Raises:
            ValueError: the engine has no model directory with that profile.
        """

        base = self.name.split("@")[0]
        if self.artifact_dir is None:
            raise ValueError(f"model {base!r} was not loaded from a decision-model directory: it has no profiles")
        path = existing_profile_path(self.artifact_dir, base, profile)
        other = copy.copy(self)
        other.temperatures = load_profile(path, load_temperatures(self.artifact_dir))
        other.name = f"{base}@{profile}"
        other.profile = profile
        return other

    @property
    def shortlist_mode(self) -> str:
        """The mode the first stage of shortlist-then-decide scores options in: ``set`` when the model reads
        it (the LM readout always does), else ``list``."""
        return "set" if "set" in self.option_modes else "list"

    @property
    def temperature_mode(self) -> str:
        """The option mode whose temperatures calibrate this engine's choice answers."""
        return self.readout.temperature_mode(self.option_mode)

    @property
    def head(self) -> PointerHead | None:
        """The trained pointer head; None for the LM readout."""
        return self.readout.head

    # -- the forward pass ------------------------------------------------------------------
    def encode(self, request: Request, option_mode: str | None = None) -> EncodedRequest:
        """The request's token ids in the readout's template (``option_mode``: default the engine's)."""
        return self.readout.encode(self.encoder, request, option_mode or self.option_mode)

    def hidden_states(self, input_ids: torch.Tensor, segment_ids: torch.Tensor, position_ids: torch.Tensor,
                      option_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Backbone body with the branch mask and restarted positions: ``[B, L]`` ids -> ``[B, L, d]``.
        ``option_ids`` (``[B, L]``) adds the sub-branch level of the mask (set-mode options, LM readout answers).
        The mask is always passed (without it transformers infers packed documents from the position
        jumps and branches 2+ lose the state, PITFALLS.md #1)."""
        return backbone_hidden(self.model, self.backend, input_ids, segment_ids, position_ids, option_ids)

    @torch.inference_mode()
    def question_logits(self, encoded: Sequence[EncodedRequest], padding_side: str = "right") -> list[list[torch.Tensor]]:
        """One packed forward over B encoded requests; uncalibrated logits per request, per question,
        each ``[K_q]`` float32 on CPU (pointer logits, or LM mean log-probabilities)."""
        return self.question_outputs(encoded, padding_side)[0]

    @property
    def abstain(self) -> bool:
        """Whether this engine's answers carry ``x_abstain`` (its pointer head has the none key, or its LM readout
        reads the none answer)."""
        return self.readout.abstain

    @torch.inference_mode()
    def question_outputs(self, encoded: Sequence[EncodedRequest], padding_side: str = "right"
                         ) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]] | None]:
        """One packed forward over B encoded requests: ``(logits, abstain)``. ``logits`` as
        :meth:`question_logits`; ``abstain`` per request, per question, the uncalibrated abstention logit (a
        scalar float32 tensor, :func:`kevlike.model.heads.pool_abstain`), read in the same pass — None for a
        model without the ``x_abstain`` capability."""
        if self.device.type == "cpu":
            self.thread_policy.apply()
        batch = pack(encoded, self.encoder.pad_id, padding_side).to(self.device)
        hidden = self.hidden_states(batch.input_ids, batch.segment_ids, batch.position_ids, batch.option_ids)
        z = self.readout.logits(self.model, hidden, batch)                                 # (B, NB, K)
        logits = [pool_orders(enc, z[b].cpu()) for b, enc in enumerate(encoded)]
        z_none = self.readout.none_logits(self.model, hidden, batch)                       # (B, NB) or None
        if z_none is None:
            return logits, None
        return logits, [pool_abstain(enc, z[b].cpu(), z_none[b].cpu()) for b, enc in enumerate(encoded)]

    def abstain_probability(self, a: torch.Tensor | float) -> float:
        """``x_abstain = sigmoid(a / T_abstain + bias)`` of an uncalibrated abstention logit ``a``: the temperature
        table's Platt scaling (:meth:`~kevlike.model.temperatures.TemperatureTable.abstain_probability`)."""
        return self.temperatures.abstain_probability(a)

    # -- public API ------------------------------------------------------------------------
    def decide(self, request: Any, *, mode: str = "packed") -> dict:
        """Answer one request (dict, JSON text or :class:`Request`); returns the Jev response dict.

        Raises:
            RequestError: invalid request (422) or over a token budget (413).
            ValueError: unknown ``mode``.
        """
        return self.decide_batch([request], mode=mode)[0]

    def prepare(self, request: Any) -> Prepared:
        """Validate, script-check and encode one request (cheap, no forward pass).

        Raises:
            RequestError: invalid request (422), over a token budget (413), or (policy ``refuse``) a
                state in a script the model was not trained on (422, type ``unsupported_script``).
        """
        req = as_request(request, self.limits)
        report = detect_script(render_text(req.state))
        if self.script_policy == "refuse":
            if self.script_trained(report.script) is False:
                raise RequestError([{
                    "loc": ["body", "state"], "type": "unsupported_script",
                    "msg": f"the state is written in {report.script} script ({report.share:.0%} of its "
                           f"{report.letters} letters); model {self.name!r} was trained on "
                           f"{', '.join(sorted(self.scripts))} only (script policy: refuse)"}])
        big = tuple(i for i, q in enumerate(req.questions) if q.type == "choice" and len(q.options) > JEV_MAX_OPTIONS)
        if not big:
            return Prepared(req, self.encode(req), report)
        if self.readout.layout(self.option_mode) == "set":
            try:
                return Prepared(req, self.encode(req), report)       # one pass: every option its own sub-branch
            except RequestError as e:
                if e.status != 413:
                    raise
        return Prepared(req, self.plan_shortlist(req, big), report)

    def plan_shortlist(self, request: Request, big: Sequence[int], shortlist: int = SHORTLIST_SIZE) -> ShortlistPlan:
        """Stage 1 of shortlist-then-decide (:class:`ShortlistPlan`) for questions ``big`` of ``request``:
        tokenized and packed into passes that fit ``limits.max_request_tokens``.

        Raises:
            RequestError: 413 when the state and one chunk do not fit the budget.
        """
        mode = self.shortlist_mode
        branches = []                                   # (question, first option, encoded branch)
        state_ids = None
        for qi in big:
            q = request.questions[qi]
            for first in range(0, len(q.options), SHORTLIST_CHUNK):
                part = replace(request, questions=(replace(q, options=q.options[first:first + SHORTLIST_CHUNK]),))
                enc = self.encode(part, mode)
                state_ids = enc.state_ids
                branches.extend((qi, first, b) for b in enc.branches)
        passes, slots, cur, total = [], [], [], len(state_ids)
        budget = self.limits.max_request_tokens
        for qi, first, b in branches:
            if cur and total + b.n_tokens > budget:
                passes.append(EncodedRequest(state_ids, tuple(replace(x, question=j) for j, (_, _, x) in enumerate(cur)), len(cur)))
                slots.append([(a, f) for a, f, _ in cur])
                cur, total = [], len(state_ids)
            cur.append((qi, first, b))
            total += b.n_tokens
        passes.append(EncodedRequest(state_ids, tuple(replace(x, question=j) for j, (_, _, x) in enumerate(cur)), len(cur)))
        slots.append([(a, f) for a, f, _ in cur])
        return ShortlistPlan(request, tuple(big), passes, slots, shortlist)

    def script_trained(self, script: str | None) -> bool | None:
        """Whether ``script`` is one the model was trained on; None when unknown (no ``scripts``
        declared) or when the state has no letters."""
        if self.scripts is None or script is None:
            return None
        return script in self.scripts

    def decide_batch(self, requests: Sequence[Any], *, mode: str = "packed") -> list[dict]:
        """Answer several requests. ``packed``: all requests padded into one batch, one forward pass;
        ``separate``: the reference path, one ``[state][branch]`` forward per question.

        Raises:
            RequestError: the first invalid request; error locations are prefixed with its index
                when more than one request is given.
            ValueError: unknown ``mode``.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        return self.run(prepare_each(self.prepare, requests), mode=mode)

    @torch.inference_mode()
    def run(self, prepared: Sequence[Prepared], *, mode: str = "packed") -> list[dict]:
        """Forward pass(es) and responses for already prepared requests (see :meth:`prepare`)."""
        if not prepared:
            return []
        if any(isinstance(p.encoded, ShortlistPlan) for p in prepared):
            out = [None] * len(prepared)
            rest = [i for i, p in enumerate(prepared) if not isinstance(p.encoded, ShortlistPlan)]
            for i, resp in zip(rest, self.run([prepared[i] for i in rest], mode=mode)):
                out[i] = resp
            for i, p in enumerate(prepared):
                if isinstance(p.encoded, ShortlistPlan):
                    out[i] = self.run_shortlist(p)
            return out
        encoded = [p.encoded for p in prepared]
        cached = [None] * len(encoded)
        abstain = [None] * len(encoded)
        if mode == "packed" and self.state_cache is not None:
            if self.device.type == "cpu":
                self.thread_policy.apply()
            logits, abstain, cached = zip(*(cached_branch_outputs(self, e, self.state_cache) for e in encoded))
            tokens = [e.n_tokens for e in encoded]
        elif mode == "packed":
            logits, a = self.question_outputs(encoded)
            abstain = a or abstain
            tokens = [e.n_tokens for e in encoded]
        else:
            logits, tokens, abstain = [], [], []
            for enc in encoded:
                singles = [self.question_outputs([enc.only_question(q)]) for q in range(enc.n_questions)]
                logits.append([z[0][0] for z, _ in singles])
                abstain.append([a[0][0] for _, a in singles] if self.abstain else None)
                tokens.append(sum(enc.only_question(q).n_tokens for q in range(enc.n_questions)))
        return [self._respond(p, z, n, c, abstain=a) for p, z, n, c, a in zip(prepared, logits, tokens, cached, abstain)]

    def probabilities(self, request: Request, logits: list[torch.Tensor]) -> list[torch.Tensor]:
        """Calibrated probabilities per question: ``softmax(z / T(type, K))`` (set-mode choice
        questions take the ``choice:set`` temperatures when the table has them), score questions through the
        table's readout (:meth:`~kevlike.model.temperatures.TemperatureTable.readout`)."""
        tempered = self._tempered(request, logits)
        return [self.temperatures.readout(q.type, p) for q, p in zip(request.questions, tempered)]

    def _tempered(self, request: Request, logits: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per question ``softmax(z / T(type, K))`` ``[K]``, before any score readout (:meth:`probabilities`)."""
        mode, table = self.temperature_mode, self.temperatures
        return [softmax_order_free(q, z, table.lookup(q.type, len(q.options), mode))
                for q, z in zip(request.questions, logits)]

    @torch.inference_mode()
    def run_shortlist(self, prepared: Prepared) -> dict:
        """Stages 1-3 of the :class:`ShortlistPlan` of a prepared request; returns the response (with
        ``x_shortlist``).

        Raises:
            RequestError: 413 when the request with its questions cut to their shortlists does not fit.
        """
        plan = prepared.encoded
        request = plan.request
        full = {qi: torch.empty(len(request.questions[qi].options)) for qi in plan.questions}
        for enc, slots in zip(plan.passes, plan.slots):
            for z, (qi, first) in zip(self.question_logits([enc])[0], slots):
                full[qi][first:first + len(z)] = z
        stage1_mode = self.shortlist_mode
        keep, p1 = {}, {}
        for qi, z in full.items():
            p1[qi] = torch.softmax(z / self.temperatures.lookup("choice", len(z), stage1_mode), -1)
            keep[qi] = torch.topk(z, min(plan.shortlist, len(z))).indices.sort().values
        questions = tuple(replace(q, options=tuple(q.options[i] for i in keep[qi].tolist())) if qi in keep else q
                          for qi, q in enumerate(request.questions))
        cut = replace(request, questions=questions)
        enc = self.encode(cut)
        logits, abstain = self.question_outputs([enc])
        logits = logits[0]
        probs = self.probabilities(cut, logits)
        final = []
        for qi, p in enumerate(probs):
            if qi not in keep:
                final.append(p)
                continue
            out = p1[qi].clone()
            mass = out[keep[qi]].sum()
            out[keep[qi]] = mass * p
            final.append(out)
        resp = self._respond(prepared, None, plan.n_tokens + enc.n_tokens, probs=final,
                             abstain=abstain[0] if abstain else None)
        resp["x_shortlist"] = {request.questions[qi].id: int(len(keep[qi])) for qi in plan.questions}
        return resp

    def _respond(self, prepared: Prepared, logits: list[torch.Tensor] | None, n_tokens: int, cached: int | None = None,
                 probs: list[torch.Tensor] | None = None, abstain: list[torch.Tensor] | None = None) -> dict:
        request, report = prepared.request, prepared.script
        pre = {}
        if probs is None:      # one softmax per question: served through the readout, and kept before it (Decision)
            table, tempered = self.temperatures, self._tempered(request, logits)
            probs = [table.readout(q.type, p) for q, p in zip(request.questions, tempered)]
            pre = {q.id: p.tolist() for q, p in zip(request.questions, tempered)
                   if table.reads_normal(q.type, len(q.options))}
        if abstain is None:
            answers = {q.id: answer(q, p.tolist()) for q, p in zip(request.questions, probs)}
        else:
            cutoffs = thresholds(request, self.abstain_above, self.p_right_below)
            answers = {q.id: answer(q, p.tolist(), x_abstain=self.abstain_probability(a), **cutoffs)
                       for q, p, a in zip(request.questions, probs, abstain)}
        out = {"model": self.name, "answers": answers, "usage": {"input_tokens": n_tokens, "output_tokens": 0},
               "x_input": report.as_dict(self.script_trained(report.script))}
        if cached is not None:  # with a state cache: the input tokens whose keys/values came from it
            out["x_cached_tokens"] = cached
        return Decision(out, pre)
