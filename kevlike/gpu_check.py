"""``kevlike gpu-check``: the GPU path checked in one call (one CUDA device, about ten minutes).

Steps, in order (each writes its figures into ``OUT/gpu_check.json`` and a line of ``OUT/report.md``):

1. ``forward_parity`` — the real model (default ``kevlike-default``) answered through ``flex_attention`` with a
   ``BlockMask`` and through ``sdpa`` with the dense ``[B, 1, L, L]`` mask, both from the same ``mask_mod``
   (:mod:`kevlike.model.kernels.masks`), fp32: max |Δp| over every answer probability of ``examples/*.json``, and
   packed vs separate under flex. Target: ≤ :data:`FORWARD_TOLERANCE`.
2. ``gradient_parity`` — one training step's loss and gradients (LoRA, delimiter rows, pointer head) of a tiny
   random Llama built by :func:`kevlike.training.train.build_model` with ``attention: flex_attention`` and with
   ``attention: sdpa``, fp32, same weights and batch (two requests, ~500 tokens, padding: several 128-token tiles).
   Target: max |Δg| / max |g| ≤ :data:`GRADIENT_TOLERANCE` per tensor.
3. ``train`` — a short run of the default recipe (``configs/default.yaml``, :data:`TRAIN_STEPS` steps, bf16 autocast,
   ``attention: auto`` = flex on CUDA): steps/s, tokens/s, loss; needs the data packages and the backbone.
4. ``bench`` — ``kevlike bench`` rows on the GPU (packed-flex vs packed-sdpa vs separate vs prefix cache vs
   cached state, S = 256, 1024, 4096; Q = 1, 4, 16, 64; K = 4).
5. ``loadtest`` — ``kevlike loadtest --spawn`` at 1, 2, 4, 8, 16, 32 and 64 concurrent clients (requests/s, latency
   percentiles; max batch 1 vs the default batcher).

A step whose prerequisites are missing (backbone not set up, a data package absent) is reported ``skipped`` with
the reason; a step that raises is ``failed`` with its one-line error; the run goes on. Exit status: 0 when no step
failed or missed its target, 1 otherwise. Without CUDA nothing runs: :class:`GpuCheckError` (one line, exit 1).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

STEPS = ("forward_parity", "gradient_parity", "train", "bench", "loadtest")
FORWARD_TOLERANCE = 1e-4
"""Max |Δp| flex vs sdpa (and packed vs separate) on the GPU in fp32. On the CPU the two agree to ~4e-7
(DESIGN §6); GPU kernels tile and accumulate differently, so the target leaves room: the first GPU run measures."""
GRADIENT_TOLERANCE = 1e-3
"""Max |Δg| / max |g| per trainable tensor, flex vs sdpa training, fp32."""
TRAIN_STEPS = 20
CONCURRENCY = "1,2,4,8,16,32,64"


class GpuCheckError(RuntimeError):
    """The check cannot run here (no CUDA device); ``str()`` is the one line the CLI prints."""


def require_cuda() -> str:
    """The CUDA device's name.

    Raises:
        GpuCheckError: no CUDA device (a CPU-only torch build, or no GPU visible).
    """
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else "no CUDA device visible"
        raise GpuCheckError(f"gpu-check needs a CUDA GPU; this machine has none ({build}, torch {torch.__version__})")
    return torch.cuda.get_device_name(0)


# --- 1. forward parity on the real model ------------------------------------------------------


def _example_requests(root: Path = Path("examples")) -> list[dict]:
    files = sorted(p for p in root.glob("*.json") if not p.name.endswith(".meta.json"))
    reqs = [json.loads(p.read_text()) for p in files]
    return [r for r in reqs if isinstance(r, dict) and "questions" in r] or [{
        "state": "Customer: I was charged twice for my March invoice and nobody answers the phone.",
        "questions": {"urgent": {"type": "noul", "instructions": "Does this need a reply within the hour?"},
                      "team": {"type": "choice", "instructions": "Which team should handle this?",
                               "criteria": {"billing": None, "sales": None, "tech": None}}}}]


def forward_parity(model: str | None = None, device: str = "cuda") -> dict:
    """Flex vs sdpa answers of ``model`` on ``device`` in fp32, and packed vs separate under flex.

    Returns ``{"requests", "questions", "max_dp_flex_vs_sdpa", "max_dp_packed_vs_separate_flex", "target",
    "passed"}`` (|Δp| over every probability of every answer; noul counts P(true) and P(false)).
    Raises :class:`kevlike.model.backbones.ModelNotFoundError` when the model is not set up.
    """
    from kevlike.eval.parity import answer_probabilities
    from kevlike.model.engine import Engine
    from kevlike.model.kernels import share_backends

    flex = Engine.from_pretrained(model, dtype="float32", device=device, backend="flex_attention")
    share_backends(flex.model)      # both engines run the one model, each with its own mask type
    sdpa = Engine(flex.model, flex.encoder.tokenizer, name=flex.name, head=flex.head, backend="sdpa",
                  temperatures=flex.temperatures, option_mode=flex.option_mode, option_orders=flex.option_orders)
    reqs = _example_requests()

    def max_dp(a: list[dict], b: list[dict]) -> float:
        out = 0.0
        for x, y in zip(a, b):
            px, py = answer_probabilities(x), answer_probabilities(y)
            out = max(out, *(abs(px[k] - py[k]) for k in px))
        return out

    by_sdpa = sdpa.decide_batch(reqs)
    by_flex = flex.decide_batch(reqs)
    separate = flex.decide_batch(reqs, mode="separate")
    dp, dps = max_dp(by_flex, by_sdpa), max_dp(by_flex, separate)
    return {"model": flex.name, "requests": len(reqs), "questions": sum(len(r["questions"]) for r in reqs),
            "max_dp_flex_vs_sdpa": dp, "max_dp_packed_vs_separate_flex": dps, "target": FORWARD_TOLERANCE,
            "passed": dp <= FORWARD_TOLERANCE and dps <= FORWARD_TOLERANCE}


# --- 2. gradient parity on a tiny model -------------------------------------------------------

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Customer: I was charged twice for my March invoice and nobody answers the phone.",
    "Does this need a reply within the hour? Which team should handle this? billing sales tech",
    "How angry is the customer? Calm Frustrated Very angry true false yes no Options Answer",
]


def save_tiny_backbone(path: str | Path, seed: int = 0) -> Path:
    """A tiny random Llama (hidden 64, 3 layers, 4 heads, 2 KV heads) and an in-memory byte-level BPE tokenizer
    saved as an HF directory at ``path`` (nothing downloaded); returns the path."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_CORPUS * 20, vocab_size=400, min_frequency=1,
                            special_tokens=["<|pad|>", "<|im_end|>"], show_progress=False)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, pad_token="<|pad|>", eos_token="<|im_end|>")
    cfg = LlamaConfig(vocab_size=420, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    path = Path(path)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _grad_examples():
    from kevlike.data.sources import Example

    long_state = " ".join(_CORPUS * 4)
    return [
        Example({"state": long_state, "questions": {
            "team": {"type": "choice", "instructions": "Which team should handle this?",
                     "criteria": {"billing": "invoices", "sales": None, "tech": None, "legal": None}},
            "team_perm": {"type": "choice", "instructions": "Which team should handle this?",
                          "criteria": {"tech": None, "billing": "invoices", "legal": None, "sales": None}},
            "anger": {"type": "score", "instructions": "How angry is the customer?",
                      "criteria": ["Calm", "Frustrated", "Very angry"]}}},
            {"team": [1.0, 0, 0, 0], "team_perm": [0, 1.0, 0, 0], "anger": [0, 0.3, 0.7]}, "grad",
            {}, [("team", "team_perm")]),
        Example({"state": "The quick brown fox jumps over the lazy dog.", "questions": {
            "fox": {"type": "noul", "instructions": "Is a fox mentioned?"},
            "team": {"type": "choice", "instructions": "Which team?",
                     "criteria": {"sales": None, "tech": None, "billing": None}}}},
            {"fox": [1.0, 0.0], "team": [0, 1.0, 0]}, "grad"),
    ]


def training_gradients(backbone_dir: str | Path, attention: str, device: str = "cpu", phase: str = "full",
                       seed: int = 0) -> tuple[float, dict[str, torch.Tensor], int]:
    """One training step's ``(loss, {parameter name: gradient (float32, CPU)}, packed length L)`` of the model
    :func:`kevlike.training.train.build_model` builds on ``backbone_dir`` with ``attention`` (``sdpa`` or
    ``flex_attention``), fp32, on the batch of :func:`_grad_examples`. LoRA's B matrices (zero at init, which would
    leave A's gradients zero) get seeded values, the same for every backend.

    Raises:
        kevlike.training.config.ConfigError: flex off CUDA with ``phase="full"``.
        NotImplementedError: from torch, if FlexAttention is asked for a backward it does not have.
    """
    from kevlike.request.encode import Encoder
    from kevlike.runs import set_seed
    from kevlike.training.config import load_config
    from kevlike.training.train import build_model, loss_terms, make_batch

    cfg = load_config(None, [f"backbone={backbone_dir}", "lora.r=8", "lora.alpha=16", f"attention={attention}",
                             f"phase={phase}", f"seed={seed}"])
    if attention == "flex_attention":
        # a fresh compile per check: on the CPU (torch 2.13) transformers' compiled flex, recompiled for a second
        # length with dynamic shapes, failed inside the kernel ("index out of bounds: 0 <= tmp71 < cur_kvSplitSize")
        torch._dynamo.reset()
    set_seed(seed)                  # as train() does: LoRA's A matrices are drawn from the global generator
    model, tok, _ = build_model(cfg, device)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    model.train()
    batch, aux = make_batch(_grad_examples(), Encoder(tok), device)
    terms = loss_terms(model(batch), batch, aux, cfg)
    terms["loss"].backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters()
             if p.requires_grad and p.grad is not None}
    return float(terms["loss"].detach()), grads, int(batch.input_ids.shape[1])


def gradient_parity(device: str = "cuda", phase: str = "full", seed: int = 0) -> dict:
    """:func:`training_gradients` with flex vs sdpa on a tiny random Llama. Returns ``{"L", "loss_sdpa",
    "loss_flex", "tensors", "max_rel_diff", "worst", "target", "passed"}`` (relative difference per tensor:
    max |g_flex − g_sdpa| / max |g_sdpa|, a zero gradient compared absolutely).

    Raises:
        NotImplementedError: FlexAttention has no backward on ``device`` (the CPU, torch 2.13) with ``phase="full"``.
    """
    with tempfile.TemporaryDirectory() as d:
        path = save_tiny_backbone(Path(d) / "tiny", seed)
        loss_s, g_s, L = training_gradients(path, "sdpa", device, phase, seed)
        loss_f, g_f, _ = training_gradients(path, "flex_attention", device, phase, seed)
    if g_s.keys() != g_f.keys():
        raise ValueError(f"flex and sdpa trained different tensors: {sorted(g_s.keys() ^ g_f.keys())[:3]}")
    rel = {}
    for n in g_s:
        scale = g_s[n].abs().max().item()
        diff = (g_f[n] - g_s[n]).abs().max().item()
        rel[n] = diff / scale if scale > 0 else diff
    worst = max(rel, key=rel.get)
    return {"L": L, "phase": phase, "loss_sdpa": loss_s, "loss_flex": loss_f, "tensors": len(rel),
            "nonzero_tensors": sum(1 for n in g_s if g_s[n].abs().max() > 0), "max_rel_diff": rel[worst],
            "worst": worst, "target": GRADIENT_TOLERANCE,
            "passed": rel[worst] <= GRADIENT_TOLERANCE and abs(loss_f - loss_s) <= 1e-4 * max(1.0, abs(loss_s))}


# --- 3-5. training run, benchmark, load test ----------------------------------------------------


def short_training(out: Path, steps: int = TRAIN_STEPS, config: str = "configs/default.yaml") -> dict:
    """``kevlike train CONFIG`` for ``steps`` steps into ``out/train`` (validation of 8 requests per task at the end,
    attention ``auto``); returns the run's summary plus ``steps_per_s``, ``tokens_per_s`` and its attention
    backend. Raises :class:`kevlike.data.sources.DataUnavailableError` when a data package is missing."""
    from kevlike.training.train import train

    run = train(config, [f"max_steps={steps}", f"eval_every={steps}", "checkpoint_every=0", "validation.n=8",
                         f"output_dir={out / 'train'}", "max_minutes=4"], quiet=True)
    summary = json.loads((run / "summary.json").read_text())
    meta = json.loads((run / "meta.json").read_text())
    wall = summary["wall_s"] or math.nan
    return {"run": str(run), "steps": summary["steps"], "wall_s": wall, "steps_per_s": summary["steps"] / wall,
            "tokens_per_s": summary["tokens"] / wall, "attention": meta.get("attention"),
            "precision": meta.get("precision"), "validation_nll": summary["best_validation_nll"],
            "stop_reason": summary["stop_reason"]}


def bench_rows(out: Path, model: str | None = None) -> dict:
    """``kevlike bench`` on the GPU (the engine's flex backend against sdpa), rows written to ``out/bench.json``."""
    from kevlike.eval.bench import run

    rows = run(model, reps=3, json_path=str(out / "bench.json"), S=[256, 1024, 4096], Q=[1, 4, 16, 64], K=[4],
               compare=["sdpa"])
    return {"cells": len(rows), "json": str(out / "bench.json")}


def loadtest_rows(out: Path, model: str | None = None) -> dict:
    """``kevlike loadtest --spawn`` at :data:`CONCURRENCY` clients, results in ``out/loadtest.json``."""
    from kevlike.eval import loadtest

    code = loadtest.run(spawn=True, model=model, concurrency=CONCURRENCY, requests=128, max_seconds=40,
                        json_path=str(out / "loadtest.json"))
    if code:
        raise RuntimeError(f"kevlike loadtest exited {code}")
    return {"json": str(out / "loadtest.json"), "concurrency": CONCURRENCY}


# --- the run ----------------------------------------------------------------------------------


def _prerequisite(e: BaseException) -> bool:
    """Whether ``e`` says a prerequisite is missing (the step is skipped, not failed)."""
    from kevlike.data.sources import DataUnavailableError
    from kevlike.model.backbones import ModelNotFoundError, SetupError

    return isinstance(e, (DataUnavailableError, ModelNotFoundError, SetupError))


def run_checks(out: str | Path, model: str | None = None, only: list[str] | None = None,
               budget_s: float = 570.0) -> dict:
    """Run :data:`STEPS` (or ``only``, in :data:`STEPS` order) on the CUDA device; a step that would start after
    ``budget_s`` seconds is skipped. Writes ``out/gpu_check.json`` and ``out/report.md``; returns the results
    ``{"device", "torch", "steps": {name: {"status": passed|failed|skipped, "seconds", ...}}, "ok"}``.

    Raises:
        GpuCheckError: no CUDA device.
        ValueError: an unknown step in ``only``.
    """
    device = require_cuda()
    unknown = [s for s in (only or []) if s not in STEPS]
    if unknown:
        raise ValueError(f"--only: unknown step(s) {', '.join(unknown)} (steps: {', '.join(STEPS)})")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    import transformers

    result = {"device": device, "torch": torch.__version__, "transformers": transformers.__version__, "steps": {}}
    calls = {"forward_parity": lambda: forward_parity(model),
             "gradient_parity": lambda: gradient_parity("cuda"),
             "train": lambda: short_training(out),
             "bench": lambda: bench_rows(out, model),
             "loadtest": lambda: loadtest_rows(out, model)}
    t_start = time.monotonic()
    for name in (s for s in STEPS if only is None or s in only):
        if time.monotonic() - t_start > budget_s:
            result["steps"][name] = {"status": "skipped", "reason": f"over the {budget_s:.0f} s budget"}
            continue
        print(f"gpu-check: {name} ...", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            figures = calls[name]()
            status = "passed" if figures.get("passed", True) else "failed"
            entry = {"status": status, **figures}
        except Exception as e:  # a step's failure is a result; the next step still runs
            entry = {"status": "skipped" if _prerequisite(e) else "failed",
                     "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
            if entry["status"] == "failed":
                entry["traceback"] = traceback.format_exc(limit=6)
        entry["seconds"] = round(time.monotonic() - t0, 1)
        result["steps"][name] = entry
        torch.cuda.empty_cache()
        print(f"gpu-check: {name}: {entry['status']} ({entry['seconds']} s)", file=sys.stderr, flush=True)
    result["ok"] = not any(s["status"] == "failed" for s in result["steps"].values())
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "report.md").write_text(report(result))
    return result


def report(result: dict) -> str:
    """Markdown: one row per step with its status, seconds and figures."""
    lines = [f"# kevlike gpu-check on {result['device']} (torch {result['torch']}, transformers "
             f"{result['transformers']})", "", "| step | status | s | figures |", "|---|---|---|---|"]
    for name, s in result["steps"].items():
        figs = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items()
                         if k not in ("status", "seconds", "traceback"))
        lines.append(f"| {name} | {s['status']} | {s.get('seconds', '')} | {figs} |")
    return "\n".join(lines) + "\n"


def run(*, out: str, model: str | None, only: str | None, budget: float) -> int:
    """``kevlike gpu-check``: :func:`run_checks` (``only``: comma-separated steps); exit 0 when no step failed, 1
    otherwise or without a GPU (one line on stderr)."""
    try:
        result = run_checks(out, model, [s for s in only.split(",") if s] if only else None, budget)
    except GpuCheckError as e:
        print(f"kevlike: error: {e}", file=sys.stderr)
        return 1
    print(report(result))
    print(f"results: {Path(out) / 'gpu_check.json'}")
    return 0 if result["ok"] else 1
