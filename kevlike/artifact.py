"""Decision-model directory (DESIGN.md §11): what turns a backbone into a trained decision model.

    kevlike.json          manifest: backbone name or path (and its hash), delimiter tokens and ids,
                          head shape, format version, training config and metrics
    adapter/              the peft LoRA adapter (optional; absent = the frozen backbone)
    head.safetensors      pointer head weights (w_q, w_k)
    delimiters.safetensors  the input-embedding rows of the delimiter ids
    calibration.json      temperatures (see :mod:`kevlike.calibrate`)

Loading restores bit-identical head weights and delimiter rows; the adapter is merged into the
backbone's weights (``merge_and_unload``), so serving runs the stock model with no peft layer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .calibrate import TemperatureTable
from .encode import DELIMITERS, Encoder
from .heads import PointerHead

FORMAT = 1


def save_decision_model(path: str | Path, *, backbone: str, model, tokenizer, head: PointerHead,
                        temperatures: TemperatureTable | None = None, extra: dict | None = None,
                        adapter=None) -> Path:
    """Write the directory. ``model`` is the backbone (or the peft model) whose input embeddings give the
    trained delimiter rows; ``adapter`` a peft model whose LoRA adapter is saved under ``adapter/``
    (without the embedding matrix: only the delimiter rows are trained, DESIGN §11)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    enc = Encoder(tokenizer)
    ids = list(enc.delimiter_ids)
    if adapter is not None:
        adapter.save_pretrained(str(path / "adapter"), save_embedding_layers=False)
    save_file({"w_q": head.w_q.weight.detach().cpu().contiguous(), "w_k": head.w_k.weight.detach().cpu().contiguous()},
              str(path / "head.safetensors"))
    emb = model.get_input_embeddings()
    with torch.no_grad():  # through the module, so peft's trainable-token rows are the ones read
        rows = emb(torch.tensor(ids, device=next(model.parameters()).device)).detach().float().cpu().contiguous()
    save_file({"rows": rows}, str(path / "delimiters.safetensors"))
    save_calibration(path, temperatures or TemperatureTable())
    (path / "kevlike.json").write_text(json.dumps({
        "format": FORMAT, "backbone": str(backbone), "delimiters": list(DELIMITERS), "delimiter_ids": ids,
        "head": {"d_model": head.d_model, "d_head": head.d_head}, **(extra or {}),
    }, indent=2))
    return path


def save_calibration(path: str | Path, table: TemperatureTable, report: dict | None = None) -> None:
    """Write ``calibration.json`` (temperatures, their source and the fit report) into a decision-model dir."""
    (Path(path) / "calibration.json").write_text(json.dumps({
        "source": table.source, "by_type": table.by_type,
        "by_bucket": [{"type": k[0], "bucket": k[1], "temperature": v} for k, v in table.by_bucket.items()],
        **({"fit": report} if report else {}),
    }, indent=2))


def load_decision_model(path: str | Path, model, tokenizer) -> tuple[object, PointerHead, TemperatureTable]:
    """Apply a decision model to a loaded backbone: merge the LoRA adapter (if any), restore the
    delimiter rows and the head. Returns ``(model, head, temperatures)``; use the returned model (the
    backbone with the adapter merged into its weights).

    Raises:
        ValueError: unknown format, or delimiter ids that differ from the tokenizer's.
    """
    path = Path(path)
    manifest = json.loads((path / "kevlike.json").read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: unsupported decision-model format {manifest.get('format')!r} (expected {FORMAT})")
    enc = Encoder(tokenizer)
    if list(enc.delimiter_ids) != manifest["delimiter_ids"]:
        raise ValueError(f"{path}: delimiter ids {manifest['delimiter_ids']} do not match the tokenizer's "
                         f"{list(enc.delimiter_ids)}")
    from .backbones import ensure_embedding_rows

    ensure_embedding_rows(model, len(tokenizer))
    if (path / "adapter").exists():
        import warnings

        from peft import PeftModel

        with warnings.catch_warnings():  # peft 0.21 calls a transformers API deprecated in v5 (FutureWarning)
            warnings.simplefilter("ignore", FutureWarning)
            model = PeftModel.from_pretrained(model, str(path / "adapter")).merge_and_unload()
        model.eval()
    rows = load_file(str(path / "delimiters.safetensors"))["rows"]
    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        emb[manifest["delimiter_ids"]] = rows.to(emb.dtype).to(emb.device)
    h = manifest["head"]
    head = PointerHead(h["d_model"], h["d_head"])
    head.load_state_dict({"w_q.weight": (w := load_file(str(path / "head.safetensors")))["w_q"], "w_k.weight": w["w_k"]})
    head.to(emb.device).eval()
    return model, head, load_temperatures(path)


def load_temperatures(path: str | Path) -> TemperatureTable:
    """The temperature table of a decision-model directory (its ``calibration.json``), or of a
    calibration file itself (a profile, see :func:`profile_path`)."""
    path = Path(path)
    cal = json.loads((path if path.suffix == ".json" else path / "calibration.json").read_text())
    return TemperatureTable(by_bucket={(r["type"], r["bucket"]): r["temperature"] for r in cal["by_bucket"]},
                            by_type=cal["by_type"], source=cal["source"])


# --- calibration profiles ------------------------------------------------------------------------

PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_profile_name(name: str) -> str:
    """Validate a profile name (letters, digits, ``_ . -``, 1-64 characters, not starting with a
    punctuation mark) and return it.

    Raises:
        ValueError: any other name.
    """
    if not isinstance(name, str) or not PROFILE_NAME.match(name):
        raise ValueError(f"profile name must be 1-64 letters, digits, '_', '.' or '-' (not first), got {name!r}")
    return name


def profiles_dir(artifact_dir: str | Path, model_name: str) -> Path:
    """Where the calibration profiles of a decision model live: ``profiles/`` inside the model directory,
    except for a model shipped inside the installed package (read-only, replaced on upgrade), whose
    profiles go under ``$KEVLIKE_HOME/profiles/MODEL_NAME/``."""
    artifact_dir = Path(artifact_dir).resolve()
    package = Path(__file__).resolve().parent
    if package in artifact_dir.parents:
        from .backbones import kevlike_home

        return kevlike_home() / "profiles" / model_name.replace("/", "_")
    return artifact_dir / "profiles"


def profile_path(artifact_dir: str | Path, model_name: str, name: str) -> Path:
    """The file of profile ``name`` (``NAME.json``, the format of ``calibration.json``)."""
    return profiles_dir(artifact_dir, model_name) / f"{check_profile_name(name)}.json"


def list_profiles(artifact_dir: str | Path, model_name: str) -> list[str]:
    """The profile names stored for a model, sorted."""
    d = profiles_dir(artifact_dir, model_name)
    return sorted(p.stem for p in d.glob("*.json") if PROFILE_NAME.match(p.stem)) if d.is_dir() else []


def save_profile(artifact_dir: str | Path, model_name: str, name: str, table: TemperatureTable,
                 report: dict | None = None) -> Path:
    """Write profile ``name`` (atomically: a server starting meanwhile never reads half a file)."""
    path = profile_path(artifact_dir, model_name, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({
        "source": table.source, "by_type": table.by_type,
        "by_bucket": [{"type": k[0], "bucket": k[1], "temperature": v} for k, v in table.by_bucket.items()],
        **({"fit": report} if report else {}),
    }, indent=2))
    tmp.replace(path)
    return path
