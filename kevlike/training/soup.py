"""Interpolate decision models trained from one another: ``θ = (1 − α)·θ_A + α·θ_B`` for two, or a weighted
mean ``Σ w_i·θ_i`` of several (a "model soup"), for every trained tensor (LoRA A and B matrices, the
delimiter rows, the pointer head), written as a new decision-model directory.

Why: a fine-tune from an earlier stage tends to gain on its training distribution and lose a little on
what it never saw; interpolating the weights of the fine-tune with those it started from often keeps
most of both (WiSE-FT: Wortsman et al., "Robust fine-tuning of zero-shot models", CVPR 2022; model soups:
Wortsman et al., ICML 2022, whose "uniform soup" is the mean of several fine-tunes of one start). LoRA's A and B
are interpolated separately, so the product ``B·A`` is the interpolation of the updates only up to second
order in their difference (``‖θ_B − θ_A‖`` is ~5 %
of ``‖θ_A‖`` between consecutive kevlike stages; the script prints it).

A head without x_abstain's none key (``w_none``, ``b_none``) beside one with it counts as that key's zero
initialisation, and the soup declares every capability of its ingredients. The result keeps the first model's
manifest (its serving settings such as ``option_mode``, and its training record), with ``training.interpolation`` = ``{"models", "weights",
"ingredients"}`` (each model's config name, seed, git commit, kept step and validation NLL, and for a model
that is itself a soup its own ``interpolation`` record), and T = 1 for every type (its ``calibration.json`` says it was not fitted): calibrate it before use. The first
model's ``MODEL_CARD.md`` is not copied (it describes other weights); the soup's card says what it is made of.

    kevlike soup kevlike/models/default runs/facts-STAMP/artifact runs/soup --alpha 0.5
    kevlike soup kevlike/models/default runs/one/artifact runs/two/artifact runs/soup3
    kevlike calibrate runs/soup --n 30

``kevlike soup`` exits 2 with one line when a folder is not a decision model, the models do not have the same
backbone, delimiters, LoRA configuration and tensors, or the weights are not one per model, non-negative, summing
to 1.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from kevlike.model.modeldir import ModelDir, save_calibration
from kevlike.model.temperatures import TemperatureTable

ADAPTER_WEIGHTS = f"{ModelDir.ADAPTER}/{ModelDir.ADAPTER_WEIGHTS}"
TENSOR_FILES = (ADAPTER_WEIGHTS, ModelDir.HEAD, ModelDir.DELIMITERS)
# not base_model_name_or_path: peft records the backbone's folder, which moves with $KEVLIKE_HOME (a model trained on
# another machine); the manifest's backbone name and GGUF hash (SAME_MANIFEST) say which backbone it is
SAME_CONFIG = ("r", "lora_alpha", "target_modules", "trainable_token_indices")
SAME_MANIFEST = ("backbone", "backbone_sha256", "delimiters", "delimiter_ids", "head", "readout")


def _ingredient(manifest: dict) -> dict:
    """What identifies a model inside a soup's manifest once its folder is gone: training config name and
    seed, git commit, and the step and validation NLL of the kept checkpoint (None where not recorded); for a
    model that is itself a soup, also its ``interpolation`` record (whose training record is its first
    ingredient's)."""
    t = manifest.get("training") or {}
    cfg, metrics = t.get("config") or {}, t.get("metrics") or {}
    out = {"config": cfg.get("name"), "seed": cfg.get("seed"), "git_commit": t.get("git_commit"),
           "step": metrics.get("step"), "validation_nll": metrics.get("nll")}
    if t.get("interpolation"):       # a soup itself: its own ingredients, which its training record does not show
        out["interpolation"] = t["interpolation"]
    return out


def _card(models: list[Path], weights: list[float], ingredients: list[dict]) -> str:
    """The soup's ``MODEL_CARD.md``: its ingredients (:func:`_ingredient`) with their weights (Markdown)."""
    def cells(i: dict) -> str:
        nll = i["validation_nll"]
        if "interpolation" not in i:
            return f"{i['config']} | {i['seed']} | {i['step']} | {f'{nll:.3f}' if isinstance(nll, float) else nll}"
        inner = ", ".join(f"{w:.3g} {j['config']} seed {j['seed']}" for w, j in
                          zip(i["interpolation"]["weights"], i["interpolation"]["ingredients"]))
        return f"a soup ({inner}) | | |"

    rows = [f"| {w:g} | `{m}` | {cells(i)} |" for w, m, i in zip(weights, models, ingredients)]
    return "\n".join([
        "# A weight average (model soup) of decision models", "",
        "Written by `kevlike soup`: every trained tensor is the weighted mean of the models below. The "
        "serving settings and the training record in `kevlike.json` are the first model's; "
        "`training.interpolation` lists the ingredients. Temperatures are 1 until `kevlike calibrate` fits them.", "",
        "| weight | model | config | seed | kept step | validation NLL |", "|---|---|---|---|---|---|", *rows, ""])


def soup(models: list[Path], weights: list[float], out: Path) -> list[float]:
    """Write ``θ = Σ_i w_i·θ_i`` of every trained tensor of ``models`` to ``out``; return ``‖θ_i − θ_0‖ /
    ‖θ_0‖`` over the LoRA tensors for each model (0 for the first). The model is built in a temporary folder
    next to ``out`` and renamed at the end, so a refusal leaves nothing behind. The manifest is the first
    model's (its serving settings such as ``option_mode``, and its training record), with ``training.interpolation = {"models", "weights", "ingredients"}``; no model's calibration, calibration
    profiles or model card is copied (they describe other weights): ``MODEL_CARD.md`` lists the ingredients.

    Raises:
        ValueError: fewer than two models, a weight count that is not the model count, a negative weight,
            weights that do not sum to 1, ``out`` existing, a folder that is not a decision model (a missing
            or unreadable file), or models that differ in backbone, delimiters, LoRA configuration, tensor
            names or shapes (the message names the first difference).
    """
    if len(models) < 2:
        raise ValueError(f"needs at least two models, got {len(models)}")
    if len(weights) != len(models):
        raise ValueError(f"{len(weights)} weights for {len(models)} models")
    if not all(math.isfinite(w) and w >= 0.0 for w in weights) or not abs(sum(weights) - 1.0) <= 1e-6:
        raise ValueError(f"weights must be finite, non-negative and sum to 1, got {weights}")   # NaN compares false
    if out.exists():
        raise ValueError(f"{out} exists; choose a new directory")
    try:
        manifests = [ModelDir(m).manifest() for m in models]
        configs = [ModelDir(m).adapter_config() for m in models]
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"not a decision-model directory with a LoRA adapter: {e}") from None
    ma, ca = manifests[0], configs[0]
    for mb, cb in zip(manifests[1:], configs[1:]):
        for key in SAME_MANIFEST:
            if ma.get(key) != mb.get(key):
                raise ValueError(f"different {key}: {ma.get(key)!r} and {mb.get(key)!r}")
        for key in SAME_CONFIG:
            va, vb = ca.get(key), cb.get(key)
            if key == "target_modules" and isinstance(va, list) and isinstance(vb, list):
                va, vb = sorted(va), sorted(vb)
            if va != vb:
                raise ValueError(f"different LoRA configuration: {key} = {ca.get(key)!r} and {cb.get(key)!r}")
    tmp = out.with_name(f".{out.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(models[0], tmp, ignore=shutil.ignore_patterns(ModelDir.CALIBRATION, "profiles", "MODEL_CARD.md"))
    num, den = [0.0] * len(models), 0.0
    try:
        for name in TENSOR_FILES:
            if name == ModelDir.HEAD and ma.get("readout") == "lm":   # the LM readout: no head file
                continue
            try:
                ts = [load_file(m / name) for m in models]
            except (OSError, SafetensorError) as e:
                raise ValueError(f"{name}: {e}") from None
            if name == ModelDir.HEAD:
                ts = _with_none_key(ts)
            for t in ts[1:]:
                if set(t) != set(ts[0]):
                    raise ValueError(f"{name}: different tensors ({sorted(set(ts[0]) ^ set(t))[:3]} …)")
            mixed = {}
            for k in ts[0]:
                for t in ts[1:]:
                    if t[k].shape != ts[0][k].shape:
                        raise ValueError(f"{name}: {k} has shape {tuple(ts[0][k].shape)} and {tuple(t[k].shape)}")
                mixed[k] = sum(w * t[k].float() for w, t in zip(weights, ts)).to(ts[0][k].dtype).contiguous()
                if name == ADAPTER_WEIGHTS:
                    den += float(ts[0][k].float().pow(2).sum())
                    for i, t in enumerate(ts):
                        num[i] += float((t[k].float() - ts[0][k].float()).pow(2).sum())
            save_file(mixed, str(tmp / name), metadata={"format": "pt"})
        capabilities = sorted({c for m in manifests for c in m.get("capabilities") or []})
        if capabilities:
            ma["capabilities"] = capabilities
        ingredients = [_ingredient(m) for m in manifests]
        ma.setdefault("training", {})["interpolation"] = {
            "models": [str(m) for m in models], "weights": list(weights), "ingredients": ingredients}
        (tmp / ModelDir.MANIFEST).write_text(json.dumps(ma, indent=1))
        parts = " + ".join(f"{w:g}·{m}" for w, m in zip(weights, models))
        save_calibration(tmp, TemperatureTable(source=f"T = 1: interpolated ({parts}), not calibrated"))
        (tmp / "MODEL_CARD.md").write_text(_card(models, weights, ingredients))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.rename(out)
    return [(x / max(den, 1e-30)) ** 0.5 for x in num]


NONE_KEY = ("w_none", "b_none")


def _with_none_key(heads: list[dict]) -> list[dict]:
    """Heads with x_abstain's none key where any ingredient has it: a head without it counts as the zeros a
    fine-tune that gains the key starts from (``PointerHead(abstain=True)``, :func:`kevlike.training.train.build_model`),
    so a soup of a model with the capability and one without keeps it, scaled (refit its Platt scaling with
    ``kevlike calibrate``)."""
    full = next((h for h in heads if all(k in h for k in NONE_KEY)), None)
    if full is None:
        return heads
    # a head with part of the key is left as it is: the tensor check after this refuses it
    return [h if any(k in h for k in NONE_KEY)
            else {**h, **{k: full[k].new_zeros(full[k].shape) for k in NONE_KEY}} for h in heads]


def interpolate(a: Path, b: Path, out: Path, alpha: float) -> float:
    """``θ = (1 − α)·θ_A + α·θ_B`` written to ``out`` (:func:`soup` of two models); returns ``‖θ_B − θ_A‖ /
    ‖θ_A‖`` over the LoRA tensors.

    Raises:
        ValueError: ``alpha`` outside [0, 1], or any refusal of :func:`soup`.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"--alpha must be in [0, 1], got {alpha}")
    return soup([a, b], [1.0 - alpha, alpha], out)[1]
