"""Interpolate two decision models trained one from the other: ``θ = (1 − α)·θ_A + α·θ_B`` for every
trained tensor (LoRA A and B matrices, the delimiter rows, the pointer head), written as a new
decision-model directory.

Why: a fine-tune from an earlier stage tends to gain on its training distribution and lose a little on
what it never saw; interpolating the weights of the fine-tune with those it started from often keeps
most of both (WiSE-FT: Wortsman et al., "Robust fine-tuning of zero-shot models", CVPR 2022; model soups:
Wortsman et al., ICML 2022). LoRA's A and B are interpolated separately, so the product ``B·A`` is the
interpolation of the two updates only up to second order in their difference (``‖θ_B − θ_A‖`` is ~5 %
of ``‖θ_A‖`` between consecutive kevlike stages; the script prints it).

The result keeps B's manifest, with ``training.interpolation`` = ``{"a", "b", "alpha"}``, and T = 1 for
every type (its ``calibration.json`` says it was not fitted): calibrate it before use.

    python scripts/interpolate.py kevlike/models/default runs/facts-STAMP/artifact runs/soup --alpha 0.5
    kevlike calibrate runs/soup --n 30

Exits 2 with one line when a folder is not a decision model or the two do not have the same backbone,
delimiters, LoRA configuration and tensors.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from kevlike.model.modeldir import save_calibration
from kevlike.model.temperatures import TemperatureTable

TENSOR_FILES = ("adapter/adapter_model.safetensors", "head.safetensors", "delimiters.safetensors")
SAME_CONFIG = ("r", "lora_alpha", "target_modules", "trainable_token_indices", "base_model_name_or_path")
SAME_MANIFEST = ("backbone", "backbone_sha256", "delimiters", "delimiter_ids", "head")


def interpolate(a: Path, b: Path, out: Path, alpha: float) -> float:
    """Write the interpolated model to ``out`` and return ``‖θ_B − θ_A‖ / ‖θ_A‖`` over the LoRA tensors.
    The model is built in a temporary folder next to ``out`` and renamed at the end, so a refusal leaves
    nothing behind; B's calibration and calibration profiles are not copied (they fit B's weights).

    Raises:
        ValueError: ``alpha`` outside [0, 1], ``out`` existing, a folder that is not a decision model (a
            missing or unreadable file), or models that differ in backbone, delimiters, LoRA configuration,
            tensor names or shapes (the message names the first difference).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"--alpha must be in [0, 1], got {alpha}")
    if out.exists():
        raise ValueError(f"{out} exists; choose a new directory")
    try:
        ma, mb = (json.loads((m / "kevlike.json").read_text()) for m in (a, b))
        ca, cb = (json.loads((m / "adapter" / "adapter_config.json").read_text()) for m in (a, b))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"not a decision-model directory with a LoRA adapter: {e}") from None
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
    shutil.copytree(b, tmp, ignore=shutil.ignore_patterns("calibration.json", "profiles"))
    num = den = 0.0
    try:
        for name in TENSOR_FILES:
            try:
                ta, tb = load_file(a / name), load_file(b / name)
            except (OSError, SafetensorError) as e:
                raise ValueError(f"{name}: {e}") from None
            if set(ta) != set(tb):
                raise ValueError(f"{name}: different tensors ({sorted(set(ta) ^ set(tb))[:3]} …)")
            mixed = {}
            for k in ta:
                if ta[k].shape != tb[k].shape:
                    raise ValueError(f"{name}: {k} has shape {tuple(ta[k].shape)} and {tuple(tb[k].shape)}")
                mixed[k] = torch.lerp(ta[k].float(), tb[k].float(), alpha).to(tb[k].dtype).contiguous()
                if name.startswith("adapter/"):
                    num += float((tb[k].float() - ta[k].float()).pow(2).sum())
                    den += float(ta[k].float().pow(2).sum())
            save_file(mixed, str(tmp / name), metadata={"format": "pt"})
        mb.setdefault("training", {})["interpolation"] = {"a": str(a), "b": str(b), "alpha": alpha}
        (tmp / "kevlike.json").write_text(json.dumps(mb, indent=1))
        save_calibration(tmp, TemperatureTable(source=f"T = 1: interpolated ({alpha} of {b}), not calibrated"))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    tmp.rename(out)
    return (num / max(den, 1e-30)) ** 0.5


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="decision-model directory (alpha = 0)")
    ap.add_argument("b", type=Path, help="decision-model directory (alpha = 1), trained from a")
    ap.add_argument("out", type=Path, help="new directory for the interpolated model")
    ap.add_argument("--alpha", type=float, default=0.5, help="weight of b (default: 0.5)")
    args = ap.parse_args()
    try:
        rel = interpolate(args.a, args.b, args.out, args.alpha)
    except ValueError as e:
        print(f"interpolate: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: (1 - {args.alpha}) * {args.a} + {args.alpha} * {args.b}; |b - a| / |a| = {rel:.4f} over the "
          f"LoRA tensors; calibrate it: kevlike calibrate {args.out} --n 30")
    return 0


if __name__ == "__main__":
    sys.exit(main())
