"""The merged decision model, prepared once and kept in the cache: what makes a one-shot load fast.

Loading a decision model with a LoRA adapter means loading the backbone, importing peft, wrapping the model and
merging the adapter into every targeted weight (``merge_and_unload``), then writing the delimiter rows: on a 2-core
CPU the merge alone costs more than the backbone load (``docs/guide/benchmark.md``, "Start-up"). The result depends
only on the backbone's weights, the adapter, the delimiter rows and the precision, so :func:`load_weights` saves it
once as a plain Hugging Face directory (safetensors, memory-mapped when read) under
``$KEVLIKE_HOME/merged/KEY/`` and later loads read that directory directly, with no peft at all. The answers are
the same floats: the cached weights are the merged weights themselves, in the precision they were merged in.

``KEY`` is a sha256 over the precision, the adapter's files, the delimiter rows, the manifest's delimiter ids and
each backbone file's name, size and modification time, so a retrained adapter or a re-fetched backbone gets a new
entry. ``KEVLIKE_MERGED_CACHE=off`` turns the cache off (then nothing is read or written); an unwritable cache is
skipped with a one-line notice on stderr, never an error. An entry takes about 2 bytes a parameter in bfloat16, 4 in
float32 (270 / 540 MB for the default model); the :data:`KEEP` most recently used entries are kept, and removing
``$KEVLIKE_HOME/merged`` reclaims them all.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import torch

from kevlike.model.backbones import load_backbone
from kevlike.model.heads import PointerHead
from kevlike.model.modeldir import ModelDir, load_decision_model, load_decision_head
from kevlike.model.temperatures import TemperatureTable
from kevlike.runs import kevlike_home

ENV = "KEVLIKE_MERGED_CACHE"
"""Set to ``off`` (or ``0``, ``no``, ``false``) to load through peft every time and cache nothing."""
KEEP = 4
"""Entries kept: writing a new one removes all but the ``KEEP`` most recently used (each load touches its stamp), so
evaluating many trained candidates does not fill the disk."""
STAMP = "kevlike-merged.json"
"""The file a complete cache entry holds last (its key and what it was made from); an entry without it is ignored."""


def cache_enabled() -> bool:
    """Whether :envvar:`KEVLIKE_MERGED_CACHE` leaves the merged cache on (the default)."""
    return os.environ.get(ENV, "").strip().lower() not in ("off", "0", "no", "false")


def cache_key(artifact_dir: str | Path, backbone_dir: str | Path, dtype: str) -> str:
    """The cache key of a decision model's merged weights (the module docstring says what it covers), 64 hex
    digits. Reads the adapter and the delimiter rows (~20 MB for the default model: ~30 ms)."""
    d = ModelDir(artifact_dir)
    h = hashlib.sha256(f"kevlike-merged 1\0{dtype}\0".encode())
    h.update(json.dumps(d.manifest()["delimiter_ids"]).encode())
    for f in sorted(p for p in d.adapter_dir.rglob("*") if p.is_file()) + [d.path / d.DELIMITERS]:
        h.update(f"\0{f.relative_to(d.path)}\0".encode())
        h.update(f.read_bytes())
    for f in sorted(p for p in Path(backbone_dir).rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"\0{f.relative_to(backbone_dir)}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()


def cache_dir(key: str) -> Path:
    """Where the entry of ``key`` lives: ``$KEVLIKE_HOME/merged/KEY[:32]``."""
    return kevlike_home() / "merged" / key[:32]


def _complete(entry: Path, key: str) -> bool:
    try:
        return json.loads((entry / STAMP).read_text()).get("key") == key
    except (OSError, ValueError, AttributeError):
        return False


def _evict(root: Path) -> None:
    """Remove all but the :data:`KEEP` most recently used complete entries under ``root``."""
    stamps = sorted(root.glob(f"*/{STAMP}"), key=lambda f: f.stat().st_mtime_ns, reverse=True)
    for f in stamps[KEEP:]:
        shutil.rmtree(f.parent, ignore_errors=True)


def _save(entry: Path, key: str, model, tokenizer, artifact_dir: Path, backbone_dir: Path) -> None:
    """Write the merged model into ``entry`` atomically (a temporary folder beside it, renamed when complete);
    any OS error (a read-only or full disk) is reported on stderr in one line and leaves no partial entry."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()            # no "Writing model shards" bar on a one-shot command
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
        with warnings.catch_warnings():          # transformers 5 calls its own deprecated is_gradient_checkpointing
            warnings.simplefilter("ignore", FutureWarning)
            model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        (tmp / STAMP).write_text(json.dumps({"key": key, "artifact": str(artifact_dir), "backbone": str(backbone_dir)},
                                            indent=2) + "\n")
        if entry.exists():                       # a stale or concurrent entry of the same key: replace it
            shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
        _evict(entry.parent)
    except OSError as e:
        print(f"kevlike: note: merged-model cache not written ({entry}: {e.strerror or e}); the next load merges "
              f"again (set {ENV}=off to skip the attempt)", file=sys.stderr)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if bars:
            hf_logging.enable_progress_bar()


def load_weights(artifact_dir: str | Path | None, backbone_dir: str | Path, dtype: str, backend: str,
                 device: str | torch.device) -> tuple[object, object, PointerHead | None, TemperatureTable | None]:
    """``(model, tokenizer, head, temperatures)`` of a decision model (``head`` and ``temperatures`` None for a
    bare backbone, ``artifact_dir`` None), the adapter merged and the delimiter rows in place, in eval mode.

    With an adapter and the cache on (:func:`cache_enabled`), a cached merge is loaded when there is one, and one is
    written after a merge otherwise. ``dtype``: ``float32`` or ``bfloat16``; ``backend``: the attention
    implementation transformers is given.

    Raises:
        as :func:`kevlike.model.backbones.load_backbone` and :func:`kevlike.model.modeldir.load_decision_model`.
    """
    if artifact_dir is None:
        model, tok = load_backbone(backbone_dir, dtype, backend, device)
        return model, tok, None, None
    artifact_dir, backbone_dir = Path(artifact_dir), Path(backbone_dir)
    if not (cache_enabled() and ModelDir(artifact_dir).has_adapter()):
        model, tok = load_backbone(backbone_dir, dtype, backend, device)
        model, head, temperatures = load_decision_model(artifact_dir, model, tok)
        return model, tok, head, temperatures
    key = cache_key(artifact_dir, backbone_dir, dtype)
    entry = cache_dir(key)
    if _complete(entry, key):
        try:
            os.utime(entry / STAMP)             # most recently used: the last to be evicted
        except OSError:
            pass
        model, tok = load_backbone(entry, dtype, backend, device)
        head, temperatures = load_decision_head(artifact_dir, model, tok)
        return model, tok, head, temperatures
    model, tok = load_backbone(backbone_dir, dtype, backend, device)
    model, head, temperatures = load_decision_model(artifact_dir, model, tok)
    _save(entry, key, model, tok, artifact_dir, backbone_dir)
    return model, tok, head, temperatures
