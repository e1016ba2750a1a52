"""int8 on CPUs without bf16 units: SmoothQuant-style smoothing, then torch's dynamic int8 Linear layers.

Dynamic int8 (``torch.ao.quantization.quantize_dynamic``: per-output-channel weight scales, activations
quantized per tensor at run time on fbgemm/x86 kernels) alone costs the shipped model 0.17 of accuracy on
the generalization-quick suite: a few input channels of each Linear carry activations 10–100× larger than
the rest, and one scale per tensor flattens the others. :func:`quantize_int8` therefore first moves that
range from the activations into the weights (SmoothQuant, Xiao et al. 2023, arXiv:2211.10438, §4): for a
Linear group sharing an input X, per input channel j

    s_j = max|X_j|^α / max|W_·j|^(1 − α),   X_j ← X_j / s_j,   W_·j ← W_·j · s_j

which leaves the fp32 function unchanged. ``X / s`` is folded into what produces X: the RMSNorm weight
before q/k/v and before gate/up. ``max|X_j|`` is measured on :data:`CALIBRATION_REQUESTS` (a few
hundred tokens of built-in text) through the engine itself. ``down_proj`` (its input, ``silu(gate) · up``,
has the widest outliers) stays float32, as does ``lm_head``; measured choices in docs/guide/benchmark.md ("int8").
"""

from __future__ import annotations

import warnings

import torch
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

from kevlike.config.engine import QUANTIZE_CHOICES

ALPHA = 0.8
"""SmoothQuant's migration strength α (0.5 in the paper; 0.8 measured best here, docs/guide/benchmark.md "int8")."""


KEEP_FLOAT = ("down_proj", "lm_head")
"""Linear layers (name suffixes) that stay float32."""

CALIBRATION_REQUESTS = [
    {"state": "Order 1042 arrived two weeks late and the box was crushed. The blender inside is cracked and leaks. "
              "I want my money back, not a replacement, and I will not buy from this shop again.",
     "questions": {"refund": {"type": "noul", "instructions": "Is the customer asking for a refund?"},
                   "topic": {"type": "choice", "instructions": "What is the main complaint?",
                             "criteria": {"delivery": "late or lost delivery", "damage": "broken item",
                                          "price": "too expensive", "other": None}},
                   "anger": {"type": "score", "instructions": "How angry is the customer?",
                             "criteria": ["calm", "annoyed", "angry", "furious"]}}},
    {"state": {"ticket": 88121, "service": "payments-api", "log": "2026-03-02T10:14:55Z ERROR timeout after 30000 ms "
                                                                   "calling ledger; retry 3/3 failed; p99 latency 41 s"},
     "questions": {"sev": {"type": "choice", "instructions": "Severity of the incident",
                           "criteria": {"sev1": "customer-facing outage", "sev2": "degraded", "sev3": "minor"}},
                   "db": {"type": "noul", "instructions": "Is the database the root cause?",
                          "criteria": {"true": "the log names the database", "false": None}}}},
    {"state": "Die Lieferung kam pünktlich, aber die Anleitung fehlt. Ansonsten bin ich sehr zufrieden und würde "
              "wieder bestellen. ¡Excelente servicio! 服务很好。",
     "questions": {"happy": {"type": "noul", "instructions": "Is the writer satisfied overall?"},
                   "stars": {"type": "score", "instructions": "How many stars would this review give?",
                             "criteria": ["1", "2", "3", "4", "5"]}}},
]


def resolve_quantize(quantize: str | None, device: str | torch.device, dtype: str) -> tuple[str | None, str]:
    """``(quantize, reason)`` for a requested setting, given the resolved ``device`` and weight ``dtype``
    (:func:`kevlike.model.backbones.resolve_dtype`): ``None``/``"none"`` → ``None``; ``"int8"`` → ``"int8"``;
    ``"auto"`` → ``"int8"`` on the CPU when the weights are float32 (no bf16 matrix units, or float32 asked
    for: dynamic int8 was 1.3–1.5× faster than float32 on a 2-core AVX2 AMD EPYC, accuracy −0.011 on 650
    questions, docs/guide/benchmark.md "int8"), else ``None`` (CUDA, or bfloat16 weights: bf16 units beat int8).

    Raises:
        ValueError: an unknown setting, or ``"int8"`` off the CPU or on non-float32 weights.
    """
    if quantize not in (None, *QUANTIZE_CHOICES):
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZE_CHOICES)}, got {quantize!r}")
    device = torch.device(device)
    if quantize == "int8" and device.type != "cpu":
        raise ValueError(f"quantize='int8' runs on the CPU only (torch's dynamic int8 Linear), got device {device.type} "
                         f"(hide the GPU with CUDA_VISIBLE_DEVICES= to use it)")
    if quantize == "int8" and dtype != "float32":
        raise ValueError(f"quantize='int8' runs on the CPU from float32 weights, got dtype {dtype} (pass dtype='float32')")
    if quantize == "auto":
        if device.type == "cpu" and dtype == "float32":
            return "int8", "quantize auto: int8 on a CPU with float32 weights"
        return None, f"quantize auto: none ({device.type}, {dtype} weights)"
    if quantize == "int8":
        return "int8", "quantize int8 (asked for)"
    return None, "quantize none"


def _input_maxima(engine, linears: dict) -> dict:
    """``{name: max|X_j| [d_in]}`` of each Linear's input over :data:`CALIBRATION_REQUESTS`."""
    out, hooks, cache = {}, [], engine.state_cache
    engine.state_cache = None               # the float32 keys/values of these requests must not be served later
    for name, mod in linears.items():
        def hook(m, args, result, name=name):
            x = args[0].detach().abs().reshape(-1, args[0].shape[-1]).amax(0).float()
            out[name] = torch.maximum(out[name], x) if name in out else x
        hooks.append(mod.register_forward_hook(hook))
    try:
        for request in CALIBRATION_REQUESTS:
            engine.decide(request)
    finally:
        engine.state_cache = cache
        for h in hooks:
            h.remove()
    return out


@torch.no_grad()
def smooth(norm: torch.nn.Module, linears: list, x_max: torch.Tensor, alpha: float = ALPHA) -> torch.Tensor:
    """Divide ``norm``'s weight (the RMSNorm producing the shared input) by ``s`` and multiply every Linear's
    input columns by it (formula in the module docstring); returns ``s`` ``[d_in]``. Exact in real
    arithmetic: the group's outputs do not change beyond float rounding."""
    w_max = torch.stack([lin.weight.abs().amax(0) for lin in linears]).amax(0).clamp_min(1e-5)
    s = (x_max.clamp_min(1e-5) ** alpha / w_max ** (1 - alpha)).clamp_min(1e-5)
    norm.weight.div_(s.to(norm.weight.dtype))
    for lin in linears:
        lin.weight.mul_(s[None, :].to(lin.weight.dtype))
    return s


def quantize_int8(engine, alpha: float = ALPHA) -> int:
    """Smooth the q/k/v and gate/up inputs of every decoder layer of ``engine.model`` (a float32 Llama/Qwen2
    style decoder, LoRA already merged), then replace its Linear layers except :data:`KEEP_FLOAT` by
    torch's dynamically quantized int8 Linear, in place; returns the number of layers replaced.

    Raises:
        ValueError: a decoder layer without ``input_layernorm``/``post_attention_layernorm`` and the
            q/k/v, gate/up projections this smoothing folds into.
    """
    model = engine.model
    layers = model.get_decoder().layers
    groups = []
    for i, layer in enumerate(layers):
        try:
            a, m = layer.self_attn, layer.mlp
            groups.append((layer.input_layernorm, [a.q_proj, a.k_proj, a.v_proj], f"{i}.attn"))
            groups.append((layer.post_attention_layernorm, [m.gate_proj, m.up_proj], f"{i}.mlp"))
        except AttributeError as e:
            raise ValueError(f"int8 smoothing needs Llama/Qwen2-style decoder layers ({e})") from None
    x_max = _input_maxima(engine, {key: lins[0] for _, lins, key in groups})
    for norm, lins, key in groups:
        smooth(norm, lins, x_max[key], alpha)
    names = {n for n, mod in model.named_modules()
             if isinstance(mod, torch.nn.Linear) and not n.endswith(KEEP_FLOAT)}
    with warnings.catch_warnings():  # torch 2.13 marks the quantized tensor types deprecated (still supported)
        warnings.simplefilter("ignore")
        quantize_dynamic(model, {n: per_channel_dynamic_qconfig for n in names}, dtype=torch.qint8, inplace=True)
    return len(names)
