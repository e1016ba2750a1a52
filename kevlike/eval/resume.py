"""Resumable generalization runs: each split's records are written as the split ends, so an evaluation stopped
part-way (a session's end, a killed process) finishes later without answering its finished splits again.

A run directory of ``kevlike eval --suite generalization…`` holds:

- ``call.json``: what the answers depend on (:func:`run_call`): the model's name and a sha256 of every file of its
  directory (weights, manifest, calibration; an ensemble's members' too), the suite, half, splits, ``n``, batch
  size, the engine's precision, option mode and orders, its temperatures' source, the quantization asked for, the
  LM baseline, the server URL;
- ``splits/SPLIT.json`` per finished split (``/`` in a split's name written ``__``): a sha256 of the split's items
  (requests, targets, sources), its records (the model's, then the LM readout's), its seconds.

``kevlike eval … --resume RUN`` (the same flags as the stopped run) checks that the call is the same
(:func:`check_same_call`), reads the finished splits whose items are unchanged (:func:`read_split`), answers the
others and writes the run's results into ``RUN``. Only the standard library is imported here, so the command line
checks ``--resume`` before torch loads.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kevlike.runs import read_only_folder, write_text_atomic

CALL_FILE = "call.json"
SPLITS_DIR = "splits"


class ResumeError(ValueError):
    """``--resume RUN`` cannot continue ``RUN``: the message names the directory and what differs or is missing."""


def check_resumable(run_dir: Path) -> None:
    """Raise :class:`ResumeError` unless ``run_dir`` is an unfinished resumable run (a ``call.json``, no
    ``metrics.json``) that can be written (it and its ``splits/``, checked before any split is answered)."""
    if not run_dir.is_dir():
        raise ResumeError(f"--resume {run_dir}: not a directory")
    if not (run_dir / CALL_FILE).is_file():
        raise ResumeError(f"--resume {run_dir}: no {CALL_FILE}, so not a generalization run that can be resumed "
                          f"(runs written before resumable runs existed cannot be)")
    if (run_dir / "metrics.json").is_file():
        raise ResumeError(f"--resume {run_dir}: the run is finished (it has metrics.json); --reuse {run_dir} "
                          f"re-scores it with the model's current temperatures")
    for d in (run_dir, run_dir / SPLITS_DIR):     # before any split is answered, not after the first one
        if (ro := read_only_folder(d)) is not None:
            raise ResumeError(f"--resume {run_dir}: {ro} cannot be written (a read-only directory or file system); "
                              f"make it writable or copy the run elsewhere and resume the copy")


def weights_digest(directory: Path | None) -> str | None:
    """sha256 over every file under ``directory`` (relative path and bytes, in sorted order); None for None."""
    if directory is None:
        return None
    h = hashlib.sha256()
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        h.update(path.relative_to(directory).as_posix().encode("utf-8") + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def run_call(engine, *, suite: str, half: str | None, splits, n: int | None, batch_size: int, url: str | None,
             quantize: str, lm_baseline: bool) -> dict:
    """What a generalization run's answers depend on (``call.json``): equal calls answer equal items equally."""
    artifact = getattr(engine, "artifact_dir", None)
    members = getattr(engine, "members", None)      # an ensemble: its members' directories too
    return {"model": getattr(engine, "name", None), "weights_sha256": weights_digest(artifact),
            "members_sha256": None if members is None else [weights_digest(getattr(m, "artifact_dir", None))
                                                             for m in members],
            "suite": suite, "half": half, "splits": None if splits is None else list(splits), "n": n,
            "batch": batch_size, "url": url, "dtype": getattr(engine, "dtype", None),
            "option_mode": getattr(engine, "option_mode", None),
            "option_orders": getattr(engine, "option_orders", None),
            "temperatures": getattr(getattr(engine, "temperatures", None), "source", None),
            "quantize": quantize, "lm_baseline": lm_baseline}


def check_same_call(run_dir: Path, call: dict) -> None:
    """Raise :class:`ResumeError` naming every field where ``run_dir``'s ``call.json`` differs from ``call``."""
    check_resumable(run_dir)
    try:
        before = json.loads((run_dir / CALL_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResumeError(f"--resume {run_dir}: {CALL_FILE} is unreadable ({e})") from None
    if not isinstance(before, dict):
        raise ResumeError(f"--resume {run_dir}: {CALL_FILE} is not a JSON object")

    def same(k: str) -> bool:
        a, b = before.get(k), call.get(k)
        if k == "splits" and a is not None and b is not None:      # the same splits in another order: the same run
            return sorted(a) == sorted(b)
        return a == b

    diffs = [f"{k}: the run has {before.get(k)!r}, this call {call.get(k)!r}"
             for k in sorted(set(before) | set(call)) if not same(k)]
    if diffs:
        raise ResumeError(f"--resume {run_dir}: not the same call as the run's ({'; '.join(diffs)}); give the "
                          f"stopped run's flags, or start a new run")


def split_file(run_dir: Path, split: str) -> Path:
    return run_dir / SPLITS_DIR / (split.replace("/", "__") + ".json")


def items_digest(examples: list) -> str:
    """sha256 of a split's items: each example's request, targets, source and ``cannot_tell`` questions."""
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([e.request, e.targets, e.source, sorted(getattr(e, "cannot_tell", ()))],
                            sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n")
    return h.hexdigest()


def write_split(run_dir: Path, split: str, examples: list, records: list[dict], lm_records: list[dict],
                seconds: dict, lm_note: str | None) -> None:
    """Write one finished split (``splits/SPLIT.json``), atomically: a stopped write leaves no file."""
    path = split_file(run_dir, split)
    path.parent.mkdir(exist_ok=True)
    write_text_atomic(path, json.dumps({"split": split, "items_sha256": items_digest(examples), "seconds": seconds,
                                        "lm_note": lm_note, "records": records, "lm_records": lm_records}))


def read_split(run_dir: Path, split: str, examples: list) -> dict | None:
    """The finished split's ``{"records", "lm_records", "seconds", "lm_note"}``, or None when it has no file.

    Raises:
        ResumeError: the file is unreadable, or its items differ from ``examples`` (the suite changed since)."""
    path = split_file(run_dir, split)
    if not path.is_file():
        return None
    try:
        done = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResumeError(f"--resume {run_dir}: {path} is unreadable ({e}); delete it to answer {split} "
                          f"again") from None
    if done.get("items_sha256") != items_digest(examples):
        raise ResumeError(f"--resume {run_dir}: split {split}'s items differ from the suite's now (the suite changed "
                          f"since the run began); start a new run")
    return done
