"""The training loop (DESIGN.md §8): LoRA (peft) + trainable delimiter rows + pointer head, on the
same encode → pack → mask → backbone path as serving; accelerate drives the device(s).

``kevlike train configs/NAME.yaml [key=value ...]`` writes a run directory::

    runs/NAME-YYYYmmdd-HHMMSS/
        config.yaml        resolved config (defaults <- file <- overrides)
        meta.json          seed, git commit, versions, machine, start time
        metrics.jsonl      one line per log interval and per validation round
        loss.png           training loss and validation NLL (if matplotlib is installed)
        checkpoint/        resumable state (trainable weights, optimizer, scheduler, data stream)
        artifact/          the decision model with the best validation NLL (DESIGN §11)

``kevlike train --resume RUN_DIR`` continues from ``checkpoint/`` and ends where an uninterrupted
run would (the data stream and the RNG are restored).
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import signal
import shutil
import sys
import threading
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list
from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
from torch import nn
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from kevlike.data.labelled import read_labelled, to_examples
from kevlike.data.sources import DataUnavailableError, Example
from kevlike.data.stream import RecordedMixture, write_stream
from kevlike.data.tasks import TaskMixture, eval_examples, training_scripts
from kevlike.metrics import choice_records, records_from_logits, summarize
from kevlike.model.backbones import EMBEDDED, ModelNotFoundError, load_backbone, resolve_model
from kevlike.model.engine import Engine, backbone_hidden
from kevlike.model.heads import (
    PointerHead, abstain_logit, lm_none_scores, lm_option_scores, pointer_logits, pointer_none_logits
)
from kevlike.model.modeldir import ModelDir, ensure_embedding_rows, save_decision_model
from kevlike.request.encode import DELIMITERS, Encoder
from kevlike.request.pack import PackedBatch, pack
from kevlike.request.schema import RequestError, validate_request
from kevlike.runs import atomic_path, git_commit, set_seed
from kevlike.training.config import (ConfigError, TrainConfig, load_config, resolve_attention, resolve_precision,
                                     resume_config, save_run_config, stream_settings)
from kevlike.training.losses import normal_readout_nll, ranked_probability_score, soft_cross_entropy, symmetric_kl

# text whose mean token embedding initialises each delimiter row (a frozen backbone then reads the
# delimiters as the plain-text cues it already knows)
DELIMITER_INIT = {"<state>": "Text:", "<q>": "\nQuestion:", "<opt>": "\n-", "</opt>": ";", "<decide>": "\nAnswer:"}


class DecisionModel(nn.Module):
    """The trainable decision model: a (peft-wrapped) causal LM and a :class:`PointerHead`, or no head (``head``
    None: ``readout: lm``, the backbone's LM readout).

    ``forward(batch)`` returns pointer logits ``[B, NB, K]`` (float32, ``-inf`` on padded options); with a head
    that reads ``x_abstain`` (``head.abstain``), the pair ``(logits, none logits [B, NB])``. Without a head, the
    LM readout's scores ``[B, NB, K]`` of a batch in its template (:meth:`Encoder.encode_lm
    <kevlike.request.encode.Encoder.encode_lm>`): each option's mean answer-token log-probability
    (:func:`kevlike.model.heads.lm_option_scores`), the logits the serving engine reads for such a model; with
    ``lm_abstain`` (a batch encoded with its none answers), the pair with the none answers' scores ``[B, NB]``
    (:func:`kevlike.model.heads.lm_none_scores`).
    """

    def __init__(self, lm: nn.Module, head: PointerHead | None, backend: str = "sdpa", head_only: bool = False,
                 lm_abstain: bool = False):
        super().__init__()
        self.lm = lm
        self.head = head
        self.backend = backend
        self.head_only = head_only   # phase A: the backbone's forward without autograd, only the head learns
        self.lm_abstain = lm_abstain and head is None

    def causal_lm(self):
        """The HF causal LM inside the peft wrapper (LoRA layers injected in place)."""
        return self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm

    def forward(self, batch: PackedBatch) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.head_only):
            hidden = backbone_hidden(self.causal_lm(), self.backend, batch.input_ids, batch.segment_ids,
                                     batch.position_ids, batch.option_ids)
        if self.head is None:
            lm_head = self.causal_lm().get_output_embeddings()
            z = lm_option_scores(hidden, batch, lm_head)
            return (z, lm_none_scores(hidden, batch, lm_head)) if self.lm_abstain else z
        z = pointer_logits(self.head, hidden, batch)
        if self.head.abstain:
            return z, pointer_none_logits(self.head, hidden, batch)
        return z


def checkpointed_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of ``model`` that transformers can checkpoint (its ``GradientCheckpointingLayer``
    modules), after :meth:`~transformers.PreTrainedModel.activation_checkpointing_enable` gave them their
    checkpoint function (non-reentrant). Their ``gradient_checkpointing`` flag then turns the recompute on and off
    per micro-batch (:func:`train`'s ``recompute_above``): same gradients, less memory, a second forward.

    Raises:
        ValueError: the model does not support activation checkpointing (transformers' error)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    model.activation_checkpointing_enable()
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    for layer in layers:
        layer.gradient_checkpointing = False
    return layers


def build_model(cfg: TrainConfig, device: str | None = None):
    """Backbone + tokenizer with delimiters, LoRA and head. Returns ``(DecisionModel, tokenizer, resolved)``; the
    model's attention backend is :func:`kevlike.training.config.resolve_attention`'s for ``cfg.attention`` on
    ``device`` (flex_attention on CUDA by default, sdpa elsewhere).

    Raises:
        kevlike.training.config.ConfigError: ``attention: flex_attention`` off CUDA with ``phase: full``.
        ValueError: the backbone is a decision model, or ``init_from`` does not match the config."""

    resolved = resolve_model(cfg.backbone)
    if resolved.artifact_dir is not None:
        raise ValueError(f"backbone {cfg.backbone!r} is a decision model; train from a backbone")
    backend, _ = resolve_attention(cfg.attention, device or "cpu", cfg.phase)
    model, tok = load_backbone(resolved.backbone_dir, "float32", backend, device or "cpu")
    enc = Encoder(tok)
    ensure_embedding_rows(model, len(tok))
    emb = model.get_input_embeddings().weight
    init = _init_artifact(cfg, resolved)
    with torch.no_grad():
        if init is not None:  # the trained rows; peft's trainable tokens start from the base rows
            rows = ModelDir(init).delimiter_rows()
            emb[list(enc.delimiter_ids)] = rows.to(emb.device, emb.dtype)
        else:
            for name, tid in zip(DELIMITERS, enc.delimiter_ids):
                hint = tok(DELIMITER_INIT[name], add_special_tokens=False)["input_ids"]
                emb[tid] = emb[hint].mean(0)
    lora = cfg.lora
    peft_cfg = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                          target_modules=list(lora.target_modules), bias="none",
                          trainable_token_indices=({"embed_tokens": list(enc.delimiter_ids)}
                                                   if cfg.train_delimiters and cfg.readout == "pointer" else None))
    with warnings.catch_warnings():  # peft 0.21 calls a transformers API deprecated in v5 (FutureWarning)
        warnings.simplefilter("ignore", FutureWarning)
        lm = get_peft_model(model, peft_cfg)
    d = model.config.hidden_size
    torch.manual_seed(cfg.seed)
    if cfg.readout == "lm":       # no head: LoRA alone learns the backbone's LM readout
        if init is not None:
            _load_adapter(lm, init)
        return DecisionModel(lm, None, backend=backend, lm_abstain=cfg.head.abstain), tok, resolved
    init_abstain = init is not None and "w_none" in ModelDir(init).head_weights()
    head = PointerHead(d, cfg.head.d_head or d, abstain=cfg.head.abstain or init_abstain)
    if init is not None:
        _load_adapter(lm, init)
        w = ModelDir(init).head_weights()
        if w["w_q"].shape != head.w_q.weight.shape:
            raise ValueError(f"init_from {init}: head {tuple(w['w_q'].shape)} does not match d_head {head.d_head}")
        # strict=False: a head gaining the none key (head.abstain) starts it at 0; all else must be there
        extra = {"w_none": w["w_none"], "b_none": w["b_none"]} if init_abstain else {}
        head.load_state_dict({"w_q.weight": w["w_q"], "w_k.weight": w["w_k"], **extra}, strict=not head.abstain)
    elif cfg.head.scale_init:
        scale_fresh_head(head, model)
    head.to(device or "cpu")    # beside the backbone (train() lets accelerate move it; gpu_check uses it as built)
    head_only = cfg.phase in ("head", "abstain")
    if head_only:   # phase A: nothing of the backbone side learns
        for p in lm.parameters():
            p.requires_grad_(False)
    if cfg.phase == "abstain":   # the none key alone: the option logits stay those of init_from
        head.w_q.weight.requires_grad_(False)
        head.w_k.weight.requires_grad_(False)
    return DecisionModel(lm, head, backend=backend, head_only=head_only), tok, resolved


def _load_adapter(lm, init: Path) -> None:
    """Load ``init``'s LoRA adapter into the peft model ``lm``.

    Raises:
        ValueError: the adapter's tensors do not match the config's LoRA layout."""
    result = set_peft_model_state_dict(lm, ModelDir(init).adapter_weights())
    missing_lora = [k for k in result.missing_keys if "lora_" in k]
    if missing_lora or result.unexpected_keys:
        raise ValueError(f"init_from {init}: adapter does not match the config's LoRA layout "
                         f"(missing {missing_lora[:3]}, unexpected {list(result.unexpected_keys)[:3]})")


@torch.no_grad()
def scale_fresh_head(head: PointerHead, model: nn.Module) -> float:
    """Divide a freshly initialised head's projections by ``g = RMS(γ)``, γ the weight of the decoder's
    final RMSNorm; returns ``g`` (1.0, head unchanged, where the decoder has no such norm or ``g`` is not a
    finite number ≥ 0.05, as with a norm that stores its weight as an offset from 1).

    The head reads hidden states that leave that norm with an RMS of about ``g`` — 7.3 for
    Qwen2.5-Coder-0.5B, 1.8 for SmolLM2-135M — and its logits grow with ``g²``: unscaled, a Qwen2.5 run from
    the bare backbone started at a cross-entropy of 8.3 (SmolLM2: 1.4), spending its first steps shrinking
    the head. Scaled, every backbone starts with logits of the same size."""
    norm = getattr(model.get_decoder(), "norm", None)
    gamma = getattr(norm, "weight", None)
    if gamma is None:
        return 1.0
    g = gamma.detach().float().pow(2).mean().sqrt().item()
    if not math.isfinite(g) or g < 0.05:
        return 1.0
    head.w_q.weight.div_(g)
    head.w_k.weight.div_(g)
    return g


def _init_artifact(cfg: TrainConfig, resolved) -> Path | None:
    """The decision-model directory named by ``init_from`` (None when unset).

    Raises:
        ValueError: not a decision model, or one trained on another backbone, readout or LoRA rank.
    """
    if not cfg.init_from:
        return None

    init = resolve_model(cfg.init_from, auto_fetch=False)
    if init.artifact_dir is None:
        raise ValueError(f"init_from {cfg.init_from!r} is not a decision model (no kevlike.json)")
    if init.backbone_dir != resolved.backbone_dir:
        raise ValueError(f"init_from {cfg.init_from!r} was trained on another backbone than {cfg.backbone!r}")
    init_readout = ModelDir(init.artifact_dir).readout()
    if init_readout != cfg.readout:
        raise ValueError(f"init_from {cfg.init_from!r} reads its answers with the {init_readout} readout; the config "
                         f"says readout: {cfg.readout}")
    acfg = ModelDir(init.artifact_dir).adapter_config()
    if acfg.get("r") != cfg.lora.r or acfg.get("lora_alpha") != cfg.lora.alpha:
        raise ValueError(f"init_from {cfg.init_from!r} has LoRA r={acfg.get('r')}, alpha={acfg.get('lora_alpha')}; "
                         f"the config says r={cfg.lora.r}, alpha={cfg.lora.alpha}")
    return init.artifact_dir

# --- batches ---------------------------------------------------------------------------------


def make_batch(examples: list[Example], encoder, device, modes: list[str] | None = None,
               readout: str = "pointer", abstain: bool = False) -> tuple[PackedBatch, dict]:
    """Encode and pack examples; targets ``[B, NB, K]``, ``is_score [B, NB]``, ``cannot_tell [B, NB]`` (1.0 for a
    question of the example's ``cannot_tell``, the target of ``x_abstain``) and the twin pairs
    (``pairs_a``, ``pairs_b`` as ``(b, j)`` indices and ``perm [P, K]`` aligning b's options to a's: by key,
    or through a twin's key map ``{key of a: key of b}`` — a negation twin maps true ↔ false); ``requests``: the
    validated requests, for a distillation teacher (:func:`teacher_targets`).

    ``modes``: the option mode of each example (default all ``"list"``). In set mode a choice question's
    logits cannot depend on the order of its options, so a twin pair of two choice questions (a
    reordering twin) is dropped there: its symmetric KL would be 0 up to rounding, a term that teaches
    nothing. Twins across types (a noul and its two-option choice) stay: they tie two templates.

    ``readout``: ``"pointer"`` (the delimiter template, :meth:`Encoder.encode`) or ``"lm"`` (the LM readout's
    plain-text template, :meth:`Encoder.encode_lm`, whose options are order-free sub-branches, so its modes are
    all ``"set"``); ``abstain`` (LM readout): with each question's none answer, for ``x_abstain``."""
    if readout == "lm":
        modes = ["set"] * len(examples)
    modes = list(modes) if modes is not None else ["list"] * len(examples)
    reqs = [validate_request(e.request) for e in examples]
    encoded = [encoder.encode_lm(r, abstain) if readout == "lm" else encoder.encode(r, m) for r, m in zip(reqs, modes)]
    batch = pack(encoded, encoder.pad_id).to(device)
    B, NB, K = batch.option_mask.shape
    targets = torch.zeros(B, NB, K)
    is_score = torch.zeros(B, NB, dtype=torch.bool)
    cannot_tell = torch.zeros(B, NB)
    a_idx, b_idx, perms = [], [], []
    for b, (ex, req) in enumerate(zip(examples, reqs)):
        pos = {q.id: j for j, q in enumerate(req.questions)}
        for j, q in enumerate(req.questions):
            t = ex.targets[q.id]
            targets[b, j, :len(t)] = torch.tensor(t)
            is_score[b, j] = q.type == "score"
            cannot_tell[b, j] = float(q.id in ex.cannot_tell)
        for qa, qb, *keymap in ex.twins:
            ja, jb = pos[qa], pos[qb]
            if modes[b] == "set" and req.questions[ja].type == req.questions[jb].type == "choice":
                continue
            keymap = keymap[0] if keymap else {}
            keys_b = [o.key for o in req.questions[jb].options]
            perm = [keys_b.index(keymap.get(o.key, o.key)) for o in req.questions[ja].options]
            perms.append(perm + list(range(len(perm), K)))
            a_idx.append((b, ja))
            b_idx.append((b, jb))
    aux = {"targets": targets.to(device), "is_score": is_score.to(device), "cannot_tell": cannot_tell.to(device),
           "a": a_idx, "b": b_idx, "requests": reqs,
           "perm": torch.tensor(perms, dtype=torch.long, device=device) if perms else None}
    return batch, aux


def load_teacher(cfg: TrainConfig, device: str | torch.device = "cpu"):
    """The engine of ``cfg.distill.teacher`` (None when distillation is off), on ``device`` (the training's) with
    the training process's torch threads, in ``cfg.distill.dtype``.

    Raises:
        kevlike.model.backbones.ModelNotFoundError: the teacher is not a registered name nor a model directory.
        kevlike.model.backbones.SetupError: the teacher's backbone cannot be set up.
        ValueError: the teacher cannot be loaded as named (e.g. an ensemble member missing, a bad manifest).
    """
    if not cfg.distill.teacher:       # TrainConfig: a teacher comes with a weight > 0
        return None
    from kevlike.config.engine import EngineOptions

    try:
        return Engine.from_pretrained(cfg.distill.teacher, EngineOptions(dtype=cfg.distill.dtype,
                                                                         threads=torch.get_num_threads()),
                                      device=device)
    except ModelNotFoundError as e:
        raise ModelNotFoundError(f"distill.teacher: {e}") from None


def teacher_targets(teacher, requests: list, shape: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The teacher's calibrated answers to the batch's validated ``requests`` (:func:`make_batch`'s
    ``aux["requests"]``) as soft targets: ``(probs [B, NB, K], taught [B, NB])``,
    each question's probabilities in its listed option order (the order of :func:`make_batch`'s targets), zeros
    and ``taught`` False for padding and for a request the teacher refuses (e.g. longer than its context), which
    then trains on its gold target alone. ``shape``: the student batch's ``(B, NB, K)``. No gradient."""
    B, NB, K = shape
    probs, taught = torch.zeros(B, NB, K), torch.zeros(B, NB, dtype=torch.bool)
    for b, req in enumerate(requests):
        try:
            zs = teacher.question_logits([teacher.encode(req)])[0]
            ps = teacher.probabilities(req, zs)
        except RequestError:              # 413: over the teacher's token limits (its tokenizer counts differently)
            continue
        for j, p in enumerate(ps):
            probs[b, j, :p.shape[-1]] = p.float()
            taught[b, j] = True
    return probs, taught


def loss_terms(logits, batch: PackedBatch, aux: dict, cfg: TrainConfig) -> dict:
    """``{"loss", "ce", "perm", "ord"}``, with ``"readout"``, ``"abstain"`` and ``"distill"`` where their terms
    are on: mean CE over questions + λ_perm · mean symmetric KL over twin pairs + λ_ord · mean RPS over score
    questions (0 where a batch has none) + λ_readout · mean :func:`~kevlike.training.losses.normal_readout_nll`
    over them (reported only when λ_readout > 0) + λ_abstain · mean binary cross-entropy of the abstention logit
    (:func:`kevlike.model.heads.abstain_logit`) against ``cannot_tell`` over all questions. ``logits``:
    ``[B, NB, K]``, or the pair ``(logits, none logits [B, NB])`` of a head with the none key; with
    ``loss.abstain`` > 0 the CE and RPS skip the "cannot tell" questions (their options are no answer). With
    ``aux["teacher"]`` (``[B, NB, K]`` probabilities, :func:`teacher_targets`) and ``distill.weight`` > 0,
    + λ_distill · mean CE against the teacher's distribution over the answerable questions it answered
    (``aux["taught"]`` ``[B, NB]``), reported as ``distill``."""
    z_none = None
    if isinstance(logits, tuple):
        logits, z_none = logits
    lam_abstain = float(cfg.loss.abstain)
    valid = batch.branch_mask
    answerable = valid & (aux["cannot_tell"] < 0.5) if lam_abstain > 0 else valid
    z = logits[answerable]                                # (N, K)
    y = aux["targets"][answerable]
    zero = logits.new_zeros(())
    ce = soft_cross_entropy(z, y).mean() if z.shape[0] else zero
    perm = zero
    if aux["perm"] is not None:
        za = torch.stack([logits[b, j] for b, j in aux["a"]])
        zb = torch.stack([logits[b, j] for b, j in aux["b"]]).gather(1, aux["perm"])
        perm = symmetric_kl(za, zb).mean()
    ordq = readout = zero
    s = aux["is_score"] & answerable
    if s.any():
        ordq = ranked_probability_score(logits[s], aux["targets"][s]).mean()
        if cfg.loss.readout > 0:
            readout = normal_readout_nll(logits[s], aux["targets"][s]).mean()
    loss = ce + cfg.loss.perm * perm + cfg.loss.ord * ordq + cfg.loss.readout * readout
    out = {"ce": ce.detach(), "perm": perm.detach(), "ord": ordq.detach()}
    if aux.get("teacher") is not None and cfg.distill.weight > 0:
        taught = answerable & aux["taught"]
        kd = soft_cross_entropy(logits[taught], aux["teacher"][taught]).mean() if taught.any() else zero
        loss = loss + cfg.distill.weight * kd
        out["distill"] = kd.detach()
    if cfg.loss.readout > 0:
        out["readout"] = readout.detach()
    if lam_abstain > 0:
        if z_none is None:
            raise ValueError("loss.abstain > 0 needs x_abstain: a head with the none key or the LM readout's none "
                             "answer (head.abstain: true)")
        a = abstain_logit(logits[valid], z_none[valid])                         # (N,)
        bce = torch.nn.functional.binary_cross_entropy_with_logits(a, aux["cannot_tell"][valid])
        loss = loss + lam_abstain * bce
        out["abstain"] = bce.detach()
    return {"loss": loss, **out}

# --- validation ------------------------------------------------------------------------------


def validation_set(cfg: TrainConfig) -> list[Example]:
    """The validation examples of a resolved config: ``validation.n`` per task of ``validation.tasks`` (default
    the training tasks) from their validation splits, drawn with ``validation.seed`` (default the run's
    ``seed``), then every line of ``validation.data``."""
    tasks = cfg.validation.tasks or list(cfg.tasks)
    seed = cfg.validation.seed
    seed = cfg.seed if seed is None else seed
    out = []
    for t in tasks:
        out.extend(eval_examples(t, "validation", cfg.validation.n, seed=seed))
    if cfg.validation.data:
        path = cfg.validation.data
        out.extend(to_examples(read_labelled(path), f"data:{path}"))
    return out


def trained_scripts(cfg: TrainConfig) -> list[str]:
    """The writing systems of the tasks ``cfg`` trains on (weight > 0): the manifest's ``scripts``.

    Raises:
        kevlike.data.sources.DataUnavailableError: a data package is missing."""
    return training_scripts([t for t in cfg.tasks if cfg.task_weight(t) > 0])


def live_mixture(cfg: TrainConfig) -> TaskMixture:
    """The training stream of ``cfg`` read from the data packages: what a run draws, and what
    :func:`record_stream` records (the one construction both use, so the two streams are the same)."""
    return TaskMixture(cfg.tasks, "train", cfg.seed, files=[f.to_dict() for f in cfg.data])


def record_stream(cfg: TrainConfig, path: str | Path, processes: int = 1, quiet: bool = False) -> Path:
    """Record the draws a run of ``cfg`` takes — ``max_steps × grad_accum × batch_size × processes`` training
    examples from :class:`~kevlike.data.tasks.TaskMixture`, its :func:`validation_set` and the trained scripts —
    into a stream file (:mod:`kevlike.data.stream`) that ``stream: FILE`` trains from without the data packages.
    The examples are the live mixture's, draw for draw.

    Raises:
        kevlike.data.sources.DataUnavailableError: a data package is missing."""
    n = cfg.max_steps * cfg.grad_accum * cfg.batch_size * processes
    mixture = live_mixture(cfg)
    train_examples = [mixture.take(1)[0] for _ in tqdm(range(n), desc="record stream", unit="draw",
                                                        dynamic_ncols=True, mininterval=2, disable=quiet)]
    return write_stream(path, {**stream_settings(cfg), "scripts": trained_scripts(cfg)}, train_examples,
                        validation_set(cfg))


def validate(engine: Engine, examples: list[Example], batch_size: int = 4, set_engine: Engine | None = None) -> dict:
    """Mean NLL (nats) and accuracy per source and overall, through the serving engine. With
    ``set_engine`` (the same model in set mode) the choice questions are answered in both modes and the
    set-mode records join the summary as sources ``{source}@set``: the model is selected on both."""

    records = records_from_logits(engine, examples, batch_size)
    if set_engine is not None:
        records.extend({**r, "source": f"{r['source']}@set"} for r in choice_records(set_engine, examples, batch_size))
    return summarize(records)

def _no_curves(obj):
    """A summary without its risk–coverage curves (``abstention.curve``): metrics.jsonl keeps the figures."""
    if isinstance(obj, dict):
        return {k: _no_curves(v) for k, v in obj.items() if k != "curve"}
    return obj


def selection_score(summary: dict, cfg: TrainConfig) -> float:
    """What a validation round is selected on (lower is better): the overall NLL of the answerable questions,
    plus, with ``loss.abstain`` > 0, λ_abstain times the mean binary log loss of ``x_abstain`` (the validation
    summary's ``abstention.nll``), so a run whose options are frozen (``phase: abstain``) still selects on
    what it learns."""
    score = summary["overall"]["nll"]
    lam = float(cfg.loss.abstain)
    abst = summary["overall"].get("abstention") or {}
    if lam > 0 and abst.get("nll") is not None:
        score += lam * abst["nll"]
    return score

# --- run directory ---------------------------------------------------------------------------


def trainable_state(model: DecisionModel) -> dict:
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


_UNSET = object()


def write_artifact(path: Path, model: DecisionModel, tok, cfg: TrainConfig, resolved, metrics: dict,
                   commit: str | None = None, scripts=_UNSET) -> Path:
    """Write the decision-model directory of ``model`` at ``path``; ``commit``: the git commit the run
    started from (its ``meta.json``; default: the current one); ``scripts``: the trained scripts of its manifest
    (default: read from the tasks' data, None without the data packages)."""
    backbone = cfg.backbone
    if scripts is _UNSET:
        try:
            scripts = trained_scripts(cfg)
        except DataUnavailableError:  # artifacts written without the data packages declare no scripts
            scripts = None
    # the LM readout reads every option in its own sub-branch (set mode) whatever the request's mode
    modes = ["list", "set"] if cfg.set_share > 0 or cfg.readout == "lm" else ["list"]
    extra = {"backbone_sha256": EMBEDDED[backbone].gguf_sha256 if backbone in EMBEDDED else None,
             "scripts": scripts, "option_modes": modes, "option_mode": "set" if cfg.readout == "lm" else "list",
             "training": {"config": cfg.to_dict(), "metrics": metrics, "git_commit": commit or git_commit()}}
    parent = _init_artifact(cfg, resolved)
    if parent is not None:  # provenance: the training record of the model this run fine-tuned
        pm = ModelDir(parent).manifest()
        extra["training"]["init_from"] = {"model": str(cfg.init_from), "training": pm.get("training")}
        # a fine-tune keeps the reading of the model it starts from: its option modes (with this run's), its
        # served option mode and its option orders (before: a fine-tune of the set-mode default saved list)
        modes = list(dict.fromkeys([*pm.get("option_modes", ["list"]), *modes]))
        extra["option_modes"] = modes
        extra["option_mode"] = pm.get("option_mode", "list") if pm.get("option_mode", "list") in modes else "list"
        if "option_orders" in pm:
            extra["option_orders"] = pm["option_orders"]
    # phase abstain leaves every option logit as init_from's: its fitted temperatures still hold
    temperatures = ModelDir(parent).temperatures() if parent is not None and cfg.phase == "abstain" else None
    return save_decision_model(path, backbone=backbone, model=model.lm, tokenizer=tok, head=model.head,
                               temperatures=temperatures, extra=extra, adapter=model.lm,
                               lm_abstain=model.head is None and cfg.head.abstain)


def plot_metrics(run_dir: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    tr = [r for r in rows if r["kind"] == "train"]
    va = [r for r in rows if r["kind"] == "validation"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if tr:
        ax.plot([r["step"] for r in tr], [r["loss"] for r in tr], label="train loss")
    if va:
        ax.plot([r["step"] for r in va], [r["nll"] for r in va], "o-", label="validation NLL")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("nats")
    if tr or va:
        ax.legend()
    fig.tight_layout()
    fig.savefig(run_dir / "loss.png", dpi=100)
    plt.close(fig)

class _Interrupt:
    """SIGINT/SIGTERM handlers that ask the training loop to stop after its current step (the name of the first
    signal in :attr:`signal`); a second signal gets the previous handler (Ctrl-C twice stops at once).
    Only in the main thread (Python delivers signals there), and not for a signal the process was started
    ignoring (``nohup``, a background job's SIGINT): that one stays ignored."""

    def __init__(self):
        self.signal: str | None = None
        self._old = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) is signal.SIG_IGN:     # ignored by whoever started us (nohup, `&`): keep so
                continue
            self._old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        self.signal = signal.Signals(signum).name
        print(f"\n{self.signal}: stopping after this step (a last checkpoint and the summary are written; "
              f"send it again to stop at once)", file=sys.stderr, flush=True)
        self.restore()

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}


# --- the loop --------------------------------------------------------------------------------


def train(config_path: str | None = None, overrides: list[str] = (), resume: str | None = None,
          quiet: bool = False) -> Path:
    """Train a decision model; returns the run directory (its ``artifact/`` is the best model).

    ``resume``: a run directory to continue from its last checkpoint, with its saved config; ``overrides`` may
    then change only its budget (:data:`kevlike.training.config.RESUME_KEYS`); the changed config is saved and
    each session of the run is listed under ``resumes`` in ``meta.json`` (step, time, commit, overrides).
    SIGINT or SIGTERM (Ctrl-C, ``kill``) ends the run after the current optimizer step, without a last validation
    round: a last checkpoint, ``summary.json`` and the plot are written, ``artifact/`` stays the best validated
    model (a second signal stops at once).

    Raises:
        kevlike.training.config.ConfigError: bad config, or ``resume`` of a run that reached its ``max_steps``.
        kevlike.data.sources.DataUnavailableError: a data package is missing.
    """

    if resume:
        run_dir = Path(resume)
        cfg = resume_config(run_dir, list(overrides))
        state = run_dir / "checkpoint" / "state.pt"
        try:
            ckpt = torch.load(state, weights_only=False)
            ckpt["step"]
        except FileNotFoundError:
            raise ConfigError(f"--resume {run_dir}: no checkpoint ({state}); the run stopped before its first "
                              f"one (checkpoint_every), start it again") from None
        except Exception as e:   # a truncated or foreign file: EOFError, UnpicklingError, RuntimeError, KeyError…
            raise ConfigError(f"--resume {run_dir}: the checkpoint {state} cannot be read ({type(e).__name__}: "
                              f"{str(e)[:120]}); resume from a copy of the run or start it again") from None
        if ckpt["step"] >= cfg.max_steps:
            raise ConfigError(f"{run_dir} has finished: step {ckpt['step']} of max_steps {cfg.max_steps} (its "
                              f"artifact is {run_dir / 'artifact'}; training on is a new run with init_from= it)")
    else:
        cfg = load_config(config_path, list(overrides))
        ckpt = None
        for key, name in (("backbone", cfg.backbone), ("init_from", cfg.init_from),
                          ("distill.teacher", cfg.distill.teacher)):
            if name is not None:          # found before the accelerator starts or a run directory is made
                try:
                    resolve_model(name, auto_fetch=key == "backbone")
                except ModelNotFoundError as e:
                    raise ModelNotFoundError(f"{key}: {e}") from None
    precision, precision_reason = resolve_precision(
        cfg.mixed_precision, torch.cuda.is_available() and cfg.device != "cpu")
    accelerator = Accelerator(mixed_precision=precision, gradient_accumulation_steps=cfg.grad_accum,
                              cpu=cfg.device == "cpu")
    if not resume:  # the main process names and creates the run directory; the others are told its name
        name = [None]
        if accelerator.is_main_process:
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
            run_dir = Path(cfg.output_dir) / f"{cfg.name}-{stamp}"
            run_dir.mkdir(parents=True, exist_ok=False)
            save_run_config(cfg, run_dir)
            name = [str(run_dir)]
        if accelerator.num_processes > 1:
            broadcast_object_list(name)
        run_dir = Path(name[0])
    set_seed(cfg.seed)
    if os.environ.get("KEVLIKE_THREADS"):      # `train --threads` or the variable: N, or auto measured once here
        from kevlike.model.threads import ThreadPolicy

        ThreadPolicy.from_env(None).apply(force=True)
    if not quiet and accelerator.is_main_process:
        print(f"precision: {'bf16 autocast' if precision == 'bf16' else 'fp32'} ({precision_reason})", file=sys.stderr)
    attention, attention_reason = resolve_attention(cfg.attention, str(accelerator.device), cfg.phase)
    if not quiet and accelerator.is_main_process:
        print(f"attention: {attention} ({attention_reason})", file=sys.stderr)
    try:
        model, tok, resolved = build_model(cfg, str(accelerator.device))
        teacher = load_teacher(cfg, accelerator.device)
    except BaseException:        # an unknown backbone or init_from: leave no run directory holding only its config
        if not resume and accelerator.is_main_process and [p.name for p in run_dir.iterdir()] == ["config.yaml"]:
            shutil.rmtree(run_dir)
        raise
    if not resume and accelerator.is_main_process:
        (run_dir / "meta.json").write_text(json.dumps({
            "seed": cfg.seed, "git_commit": git_commit(), "started": datetime.now(timezone.utc).isoformat(),
            "backbone_dir": str(resolved.backbone_dir), "device": str(accelerator.device),
            "precision": precision, "precision_reason": precision_reason,
            "attention": attention, "attention_reason": attention_reason,
            "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count(),
                        "torch_threads": torch.get_num_threads(),
                        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None},
            "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                         **{m: __import__(m).__version__ for m in ("transformers", "peft", "accelerate")}},
        }, indent=2))

    encoder = Encoder(tok, getattr(model.causal_lm().config, "max_position_embeddings", None))
    if cfg.stream:     # the recorded draws of this config (record_stream): no data package is read
        mixture = RecordedMixture(cfg.stream, stream_settings(cfg))
        val_examples, scripts = mixture.validation, mixture.scripts
    else:
        mixture = live_mixture(cfg)
        val_examples, scripts = validation_set(cfg), _UNSET
    o = cfg.optim
    head_params = list(model.head.parameters()) if model.head is not None else []
    lora_params = [p for n, p in model.lm.named_parameters() if p.requires_grad and "lora_" in n]
    token_params = [p for n, p in model.lm.named_parameters() if p.requires_grad and "lora_" not in n]
    groups = [{"params": lora_params, "lr": o.lr}, {"params": head_params + token_params, "lr": o.head_lr}]
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], weight_decay=o.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(o.warmup * cfg.max_steps), cfg.max_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    inner = accelerator.unwrap_model(model)
    step, best, bad_rounds, history = 0, math.inf, 0, []
    if ckpt is not None and accelerator.is_main_process:     # each session of the run, for the record
        if overrides:
            save_run_config(cfg, run_dir)
        meta = json.loads((run_dir / "meta.json").read_text())
        meta.setdefault("resumes", []).append({
            "step": ckpt["step"], "started": datetime.now(timezone.utc).isoformat(), "git_commit": git_commit(),
            "overrides": list(overrides)})
        (run_dir / "meta.json").write_text(json.dumps(meta, indent=2))
    if ckpt is not None:
        # strict=False: the checkpoint holds only the trainable tensors, not the frozen backbone
        unexpected = inner.load_state_dict(ckpt["trainable"], strict=False).unexpected_keys
        if unexpected:
            raise ValueError(f"{run_dir}: checkpoint does not match the model ({len(unexpected)} unknown tensors, "
                             f"e.g. {unexpected[0]})")
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        mixture.load_state_dict(ckpt["mixture"])
        torch.set_rng_state(ckpt["torch_rng"])
        step, best, bad_rounds = ckpt["step"], ckpt["best"], ckpt["bad_rounds"]
    metrics_f = open(run_dir / "metrics.jsonl", "a")

    def log(row: dict) -> None:
        if accelerator.is_main_process:
            metrics_f.write(json.dumps(row) + "\n")
            metrics_f.flush()

    # validation reads the training model through the serving engine, on the training backend (an engine of
    # another backend would switch the shared model's attention implementation under the training loop)
    engine = Engine(inner.causal_lm(), tok, name=cfg.name, head=inner.head, backend=inner.backend,
                    lm_abstain=inner.lm_abstain)
    set_engine = (Engine(inner.causal_lm(), tok, name=cfg.name, head=inner.head, backend=inner.backend,
                         option_mode="set") if cfg.set_share > 0 else None)

    def run_validation() -> dict:
        inner.eval()
        summary = validate(engine, val_examples, set_engine=set_engine)
        inner.train()
        return summary

    def save_checkpoint() -> None:
        if not accelerator.is_main_process:
            return
        (run_dir / "checkpoint").mkdir(exist_ok=True)
        with atomic_path(run_dir / "checkpoint" / "state.pt") as tmp:
            torch.save({"trainable": trainable_state(inner), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "mixture": mixture.state_dict(),
                        "torch_rng": torch.get_rng_state(), "step": step, "best": best, "bad_rounds": bad_rounds,
                        "tokens": tokens}, tmp)

    start_step = step
    tokens = ckpt.get("tokens", 0) if ckpt is not None else 0
    t0 = time.monotonic()
    deadline = t0 + 60 * cfg.max_minutes if cfg.max_minutes else math.inf
    inner.train()
    bar = tqdm(total=cfg.max_steps, initial=step, desc=f"train {cfg.name}", unit="step",
               disable=quiet, dynamic_ncols=True)
    stop_reason, stopped_by = "max_steps", None      # stopped_by: the signal's name when one ended the run
    window: list[dict] = []
    interrupt = _Interrupt()
    layers = checkpointed_layers(inner.causal_lm()) if cfg.recompute_above is not None else []
    recomputed = teacher_refused = 0      # teacher_refused: requests the teacher would not answer (gold alone)
    try:
        while step < cfg.max_steps:
            for _ in range(cfg.grad_accum):
                # every process draws the same global batch and keeps its own share (one process: all of it)
                drawn = mixture.take(cfg.batch_size * accelerator.num_processes)
                examples = drawn[accelerator.process_index::accelerator.num_processes]
                # each request's option mode, a function of (seed, step, draw): the same on resume
                draw = random.Random(f"{cfg.seed}/{step}/{len(window)}")
                modes = ["set" if draw.random() < cfg.set_share else "list" for _ in examples]
                batch, aux = make_batch(examples, encoder, accelerator.device, modes, cfg.readout, cfg.head.abstain)
                if teacher is not None:
                    t, taught = teacher_targets(teacher, aux["requests"], tuple(aux["targets"].shape))
                    aux["teacher"], aux["taught"] = t.to(accelerator.device), taught.to(accelerator.device)
                    teacher_refused += int((~taught.any(dim=1)).sum())
                tokens += sum(batch.n_tokens)
                recompute = bool(layers) and batch.input_ids.numel() > cfg.recompute_above
                recomputed += recompute
                for layer in layers:
                    layer.gradient_checkpointing = recompute
                with accelerator.accumulate(model):
                    logits = model(batch)
                    terms = loss_terms(logits, batch, aux, cfg)
                    if not torch.isfinite(terms["loss"]).all():   # before any update: the weights stay finite
                        raise ValueError(f"non-finite training loss at step {step + 1}: "
                                         + ", ".join(f"{k} {float(v.detach()):g}" for k, v in terms.items())
                                         + "; the run stops here (its last checkpoint and artifact are of earlier "
                                           "steps; try a lower optim.lr or optim.grad_clip)")
                    accelerator.backward(terms["loss"])
                    if accelerator.sync_gradients:
                        accelerator.clip_grad_norm_(model.parameters(), o.grad_clip)
                    optimizer.step()
                    if accelerator.sync_gradients:
                        # stepped here, once per optimizer step: accelerate's prepared scheduler would step once per
                        # *process* (it assumes each process adds its own batch), so N processes would run the
                        # schedule N times faster than one process with the same global batch
                        scheduler.step()
                    optimizer.zero_grad()
                window.append({k: float(v.detach()) for k, v in terms.items()})
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean([w['loss'] for w in window[-20:]]):.3f}", best_val=f"{best:.3f}")
            if step % 10 == 0 or step == cfg.max_steps:
                log({"kind": "train", "step": step, "elapsed_s": round(time.monotonic() - t0, 1), "tokens": tokens,
                     "lr": scheduler.get_last_lr()[0], "recomputed_batches": recomputed,
                     **({"teacher_refused": teacher_refused} if teacher is not None else {}),
                     **{k: float(np.mean([w[k] for w in window])) for k in window[0]}})
                window = []
            last = step == cfg.max_steps or time.monotonic() > deadline
            if step % cfg.eval_every == 0 or last:
                summary = run_validation()
                row = {"kind": "validation", "step": step, "elapsed_s": round(time.monotonic() - t0, 1),
                       **_no_curves(summary["overall"]), "per_source": _no_curves(summary["per_source"])}
                log(row)
                history.append(row)
                if selection_score(summary, cfg) < best:
                    best, bad_rounds = selection_score(summary, cfg), 0
                    if accelerator.is_main_process:
                        write_artifact(run_dir / "artifact", inner, tok, cfg, resolved, row,
                                       json.loads((run_dir / "meta.json").read_text()).get("git_commit"),
                                       scripts=scripts)
                else:
                    bad_rounds += 1
                bar.write(f"step {step}: validation nll {summary['overall']['nll']:.4f} "
                          f"accuracy {summary['overall']['accuracy']:.3f} (selection score {selection_score(summary, cfg):.4f}, "
                          f"best {best:.4f})")
                if bad_rounds >= cfg.patience:
                    stop_reason = f"early stop: no better validation NLL in {cfg.patience} rounds"
                    break
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                save_checkpoint()
            if time.monotonic() > deadline:
                stop_reason = f"max_minutes={cfg.max_minutes} reached"
                break
            if cfg.stop_after and step - start_step >= cfg.stop_after and step < cfg.max_steps:
                stop_reason = f"stop_after={cfg.stop_after} (resume with: kevlike train --resume {run_dir})"
                break
            if interrupt.signal is not None and step < cfg.max_steps:
                stopped_by = interrupt.signal
                stop_reason = f"interrupted by {stopped_by} (resume with: kevlike train --resume {run_dir})"
                break
    finally:                # also when the loop raises: an in-process caller gets its handlers back
        interrupt.restore()
    bar.close()
    if cfg.checkpoint_every or step < cfg.max_steps:     # a run that can go on always leaves where it stopped
        save_checkpoint()
    metrics_f.close()
    wall = time.monotonic() - t0
    accelerator.wait_for_everyone()
    if not accelerator.is_main_process:
        return run_dir
    (run_dir / "summary.json").write_text(json.dumps({
        "steps": step, "stop_reason": stop_reason, "signal": stopped_by, "wall_s": round(wall, 1), "tokens": tokens,
        "processes": accelerator.num_processes,
        "best_validation_nll": best if math.isfinite(best) else None,
        "validation": history[-1] if history else None}, indent=2))
    plot_metrics(run_dir)
    if accelerator.is_main_process:              # the result: printed with --quiet too (it hides progress only)
        art = (f"artifact: {(run_dir / 'artifact').resolve()}" if ModelDir.holds_one(run_dir / "artifact")
               else "no artifact yet (it is written at the first validation round)")
        print(f"{stop_reason} after {step} steps in {wall / 60:.1f} min; best selection score {best:.4f} "
              f"(validation NLL{' + λ·x_abstain log loss' if cfg.loss.abstain else ''}); {art}")
    return run_dir
