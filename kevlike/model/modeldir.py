"""Decision-model directory (DESIGN.md §11): what turns a backbone into a trained decision model.

    kevlike.json          manifest: backbone name or path (and its hash), delimiter tokens and ids,
                          head shape, format version, training config and metrics
    adapter/              the peft LoRA adapter (optional; absent = the frozen backbone)
    head.safetensors      pointer head weights (w_q, w_k; with the x_abstain capability also w_none, b_none);
                          absent where the manifest says ``"readout": "lm"`` (a LoRA-tuned LM readout, no head)
    delimiters.safetensors  the input-embedding rows of the delimiter ids
    calibration.json      temperatures (see :mod:`kevlike.model.temperatures`)

Loading restores bit-identical head weights and delimiter rows; the adapter is merged into the
backbone's weights (``merge_and_unload``), so serving runs the stock model with no peft layer.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from kevlike.config.engine import PROFILE_NAME, check_profile_name  # noqa: F401  (re-exported)
from kevlike.config.train import READOUTS
from kevlike.model.heads import PointerHead
from kevlike.model.registry import MANIFEST
from kevlike.model.temperatures import ProfileError, TemperatureTable, read_temperatures
from kevlike.request.encode import DELIMITERS, Encoder
from kevlike.runs import kevlike_home, read_only_folder, write_text_atomic

FORMAT = 1
ABSTAIN = "x_abstain"
"""The capability a manifest declares (``"capabilities": ["x_abstain"]``) when its head reads an abstention."""


class ModelDir:
    """A decision-model directory: the one place that knows its file names and reads or writes them
    (the layout of the module docstring). ``path``: the directory (it need not exist yet for writing).

    Profiles (:func:`profiles_dir`) are calibration files of the same format kept beside it."""

    MANIFEST = MANIFEST
    HEAD = "head.safetensors"
    DELIMITERS = "delimiters.safetensors"
    CALIBRATION = "calibration.json"
    ADAPTER = "adapter"
    ADAPTER_CONFIG = "adapter_config.json"
    ADAPTER_WEIGHTS = "adapter_model.safetensors"

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @classmethod
    def holds_one(cls, path: str | Path) -> bool:
        """Whether ``path`` is a decision-model directory (it has a manifest)."""
        return (Path(path) / cls.MANIFEST).is_file()

    @property
    def adapter_dir(self) -> Path:
        return self.path / self.ADAPTER

    def has_adapter(self) -> bool:
        return self.adapter_dir.exists()

    def manifest(self) -> dict:
        """The parsed ``kevlike.json``.

        Raises:
            FileNotFoundError: no manifest; json.JSONDecodeError: not JSON.
        """
        return json.loads((self.path / self.MANIFEST).read_text())

    def write_manifest(self, manifest: dict) -> None:
        """Write ``kevlike.json`` (replacing it)."""
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / self.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")

    def readout(self) -> str:
        """How the model reads its answers: ``"pointer"`` (its head) or ``"lm"`` (the manifest's ``readout``: the
        backbone's LM readout through the adapter, no head file)."""
        return self.manifest().get("readout", "pointer")

    def head_weights(self) -> dict:
        """``{"w_q", "w_k"}`` tensors of the pointer head (and ``w_none``, ``b_none`` with the abstain key)."""
        return load_file(str(self.path / self.HEAD))

    def capabilities(self) -> list[str]:
        """The manifest's ``capabilities`` (``["x_abstain"]`` for a model that answers with ``x_abstain``;
        ``[]`` when absent)."""
        return list(self.manifest().get("capabilities", []))

    def delimiter_rows(self) -> torch.Tensor:
        """The input-embedding rows of the delimiter ids ``[5, d]``."""
        return load_file(str(self.path / self.DELIMITERS))["rows"]

    def adapter_config(self) -> dict:
        """The peft LoRA adapter's config (``r``, ``lora_alpha``, target modules, …)."""
        return json.loads((self.adapter_dir / self.ADAPTER_CONFIG).read_text())

    def adapter_weights(self) -> dict:
        """The LoRA adapter's tensors (peft's state-dict names)."""
        return load_file(str(self.adapter_dir / self.ADAPTER_WEIGHTS))

    @property
    def calibration_path(self) -> Path:
        return self.path / self.CALIBRATION

    def temperatures(self) -> TemperatureTable:
        """The model's own temperature table."""
        return load_temperatures(self.calibration_path)


def save_decision_model(path: str | Path, *, backbone: str, model, tokenizer, head: PointerHead | None,
                        temperatures: TemperatureTable | None = None, extra: dict | None = None,
                        adapter=None, lm_abstain: bool = False) -> Path:
    """Write the directory. ``model`` is the backbone (or the peft model) whose input embeddings give the
    trained delimiter rows; ``adapter`` a peft model whose LoRA adapter is saved under ``adapter/``
    (without the embedding matrix: only the delimiter rows are trained, DESIGN §11). ``head`` None writes a model
    that answers with the LM readout (``"readout": "lm"``, no head file; its delimiter rows, which that readout's
    template never uses, are kept untrained so that every decision model has the same files but the head);
    ``lm_abstain`` declares ``x_abstain`` for such a model (read from its none answer,
    :class:`kevlike.model.heads.LMReadout`)."""
    path = Path(path)
    d = ModelDir(path)
    path.mkdir(parents=True, exist_ok=True)
    enc = Encoder(tokenizer)
    ids = list(enc.delimiter_ids)
    if adapter is not None:
        adapter.save_pretrained(str(d.adapter_dir), save_embedding_layers=False)
    if head is not None:
        tensors = {"w_q": head.w_q.weight.detach().cpu().contiguous(),
                   "w_k": head.w_k.weight.detach().cpu().contiguous()}
        if head.abstain:
            tensors.update(w_none=head.w_none.detach().cpu().contiguous(),
                           b_none=head.b_none.detach().cpu().contiguous())
        save_file(tensors, str(path / d.HEAD))
    emb = model.get_input_embeddings()
    with torch.no_grad():  # through the module, so peft's trainable-token rows are the ones read
        rows = emb(torch.tensor(ids, device=next(model.parameters()).device)).detach().float().cpu().contiguous()
    save_file({"rows": rows}, str(path / d.DELIMITERS))
    save_calibration(path, temperatures or TemperatureTable())
    d.write_manifest({"format": FORMAT, "backbone": str(backbone), "delimiters": list(DELIMITERS), "delimiter_ids": ids,
                      **({"head": {"d_model": head.d_model, "d_head": head.d_head}} if head is not None
                         else {"readout": "lm"}),
                      **({"capabilities": [ABSTAIN]} if (head.abstain if head is not None else lm_abstain) else {}),
                      **(extra or {})})
    return path


def calibration_json(table: TemperatureTable, report: dict | None = None) -> str:
    """The text of a calibration file or profile: strict JSON (``allow_nan=False``; a non-finite number in the
    fit report, which is informational, is written as ``null``; the temperatures are finite by
    :class:`TemperatureTable`'s own checks), so :func:`read_temperatures` and any JSON reader accept it."""
    return json.dumps({**table.to_json(), **({"fit": _finite_or_null(report)} if report else {})},
                      indent=2, allow_nan=False)


def _finite_or_null(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_null(v) for v in obj]
    return obj


def save_calibration(path: str | Path, table: TemperatureTable, report: dict | None = None) -> None:
    """Write ``calibration.json`` (temperatures, their source and the fit report) into a decision-model dir
    (:func:`calibration_json`)."""
    ModelDir(path).calibration_path.write_text(calibration_json(table, report))


def load_decision_model(path: str | Path, model, tokenizer) -> tuple[object, PointerHead | None, TemperatureTable]:
    """Apply a decision model to a loaded backbone: merge the LoRA adapter (if any), restore the
    delimiter rows and the head. Returns ``(model, head, temperatures)``, ``head`` None for a model of the LM
    readout (``"readout": "lm"``); use the returned model (the
    backbone with the adapter merged into its weights). :mod:`kevlike.model.merged` keeps the merged model in a
    cache, so that later loads skip the merge.

    Raises:
        ValueError: unknown format, delimiter ids that differ from the tokenizer's, or a manifest that declares
            ``x_abstain`` over a head file without its tensors.
    """
    path = Path(path)
    d = ModelDir(path)
    manifest = _checked_manifest(path, tokenizer)
    ensure_embedding_rows(model, len(tokenizer))
    if d.has_adapter():
        import warnings

        from peft import PeftModel

        with warnings.catch_warnings():  # peft 0.21 calls a transformers API deprecated in v5 (FutureWarning)
            warnings.simplefilter("ignore", FutureWarning)
            model = PeftModel.from_pretrained(model, str(d.adapter_dir)).merge_and_unload()
        model.eval()
    rows = d.delimiter_rows()
    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        emb[manifest["delimiter_ids"]] = rows.to(emb.dtype).to(emb.device)
    return (model, *_head(path, manifest, emb.device))


def _checked_manifest(path: Path, tokenizer) -> dict:
    manifest = ModelDir(path).manifest()
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: unsupported decision-model format {manifest.get('format')!r} (expected {FORMAT})")
    enc = Encoder(tokenizer)
    if list(enc.delimiter_ids) != manifest["delimiter_ids"]:
        raise ValueError(f"{path}: delimiter ids {manifest['delimiter_ids']} do not match the tokenizer's "
                         f"{list(enc.delimiter_ids)}")
    return manifest


def load_decision_head(path: str | Path, model, tokenizer) -> tuple[PointerHead | None, TemperatureTable]:
    """The pointer head (on the model's device, eval mode; None for the LM readout) and the temperature table of
    a decision model whose
    adapter and delimiter rows are already in ``model`` (:func:`load_decision_model` puts them there; a cached
    merge of :mod:`kevlike.model.merged` holds them).

    Raises:
        ValueError: as :func:`load_decision_model`.
    """
    path = Path(path)
    return _head(path, _checked_manifest(path, tokenizer), model.get_input_embeddings().weight.device)


def _head(path: Path, manifest: dict, device) -> tuple[PointerHead | None, TemperatureTable]:
    """The head (None for the LM readout) and temperatures of the decision model at ``path`` whose manifest is
    already checked.

    Raises:
        ValueError: an unknown ``readout``; ``x_abstain`` declared over a head file without its tensors."""
    d = ModelDir(path)
    readout = manifest.get("readout", "pointer")
    if readout not in READOUTS:
        raise ValueError(f"{path}: unknown readout {readout!r} in {d.MANIFEST} ({' or '.join(READOUTS)})")
    if readout == "lm":   # x_abstain, if declared, is the none answer's score (kevlike.model.heads.LMReadout)
        return None, d.temperatures()
    h = manifest["head"]
    abstain = ABSTAIN in manifest.get("capabilities", [])
    head = PointerHead(h["d_model"], h["d_head"], abstain=abstain)
    w = d.head_weights()
    if abstain and not {"w_none", "b_none"} <= set(w):
        raise ValueError(f"{path}: the manifest declares {ABSTAIN} but {d.HEAD} has no w_none/b_none")
    head.load_state_dict({"w_q.weight": w["w_q"], "w_k.weight": w["w_k"],
                          **({"w_none": w["w_none"], "b_none": w["b_none"]} if abstain else {})})
    head.to(device).eval()
    return head, d.temperatures()


def calibration_fit(path: str | Path) -> dict | None:
    """The fit report stored in a decision-model directory's ``calibration.json`` (its ``fit``: see
    :func:`kevlike.model.temperatures.fit_table`), or None when the file has none or cannot be read as JSON."""
    try:
        fit = json.loads(ModelDir(path).calibration_path.read_text()).get("fit")
    except (OSError, ValueError, AttributeError):
        return None
    return fit if isinstance(fit, dict) else None


def load_temperatures(path: str | Path) -> TemperatureTable:
    """The temperature table of a decision-model directory (its ``calibration.json``), or of a
    calibration file itself (a profile, see :func:`profile_path`), checked by :func:`read_temperatures`.

    Raises:
        kevlike.model.temperatures.ProfileError: an unreadable or invalid file (one line naming the file and the
            field).
    """
    path = Path(path)
    return read_temperatures(path if path.suffix == ".json" else ModelDir(path).calibration_path)


# --- calibration profiles ------------------------------------------------------------------------

def load_profile(path: str | Path, own: TemperatureTable) -> TemperatureTable:
    """Calibration profile ``path`` over the model's own temperatures ``own``, as ``kevlike calibrate --profile``
    writes one (:func:`kevlike.model.temperatures.fit_table`'s ``base``): a type the profile names nowhere (not in
    ``by_type``, not in ``by_bucket``) keeps the model's own temperature and buckets, never T = 1; ``abstain_bias``
    comes from the model when the profile names neither it nor the ``abstain`` type, ``score_readout`` when it
    names neither it nor the ``score`` type (a hand-written profile of one type changes that type alone; naming
    ``choice`` names ``choice:set`` too).

    Raises:
        kevlike.model.temperatures.ProfileError: as :func:`load_temperatures`.
    """
    prof = load_temperatures(path)
    raw = json.loads(Path(path).read_text(encoding="utf-8"))         # read_temperatures has checked it
    named = set(prof.by_type) | {t for t, _ in prof.by_bucket}
    if "choice" in named:          # set-mode choice reads choice:set first: the profile's choice must reach it
        named.add("choice:set")
    return replace(
        prof, by_type={**{t: v for t, v in own.by_type.items() if t not in named}, **prof.by_type},
        by_bucket={**{k: v for k, v in own.by_bucket.items() if k[0] not in named}, **prof.by_bucket},
        abstain_bias=(prof.abstain_bias if "abstain_bias" in raw or "abstain" in named else own.abstain_bias),
        score_readout=(prof.score_readout if "score_readout" in raw or "score" in named else own.score_readout))


def profiles_dir(artifact_dir: str | Path, model_name: str) -> Path:
    """Where the calibration profiles of a decision model live: ``profiles/`` inside the model directory,
    except for a model shipped inside the installed package (read-only, replaced on upgrade), whose
    profiles go under ``$KEVLIKE_HOME/profiles/MODEL_NAME/``."""
    artifact_dir = Path(artifact_dir).resolve()
    package = Path(__file__).resolve().parents[1]          # the installed kevlike package
    if package in artifact_dir.parents:
        return kevlike_home() / "profiles" / model_name.replace("/", "_")
    return artifact_dir / "profiles"


def profile_path(artifact_dir: str | Path, model_name: str, name: str) -> Path:
    """The file of profile ``name`` (``NAME.json``, the format of ``calibration.json``)."""
    return profiles_dir(artifact_dir, model_name) / f"{check_profile_name(name)}.json"


def profile_source(artifact_dir: str | Path, model_name: str, name: str) -> str | None:
    """What profile ``name`` now holds, in words for a message (its temperatures' ``source``: what they were fitted
    on), or None when there is no such profile; ``"that could not be read"`` for a file that is not a profile."""
    path = profile_path(artifact_dir, model_name, name)
    if not path.is_file():
        return None
    try:
        return f"fitted before: {read_temperatures(path).source}"
    except ProfileError:
        return "that could not be read"


def existing_profile_path(artifact_dir: str | Path, model_name: str, name: str) -> Path:
    """:func:`profile_path` of a profile that exists.

    Raises:
        ValueError: a bad name, or no such profile (the message names the file looked for and the profiles there)."""
    path = profile_path(artifact_dir, model_name, name)
    if path.is_symlink() and not path.exists():     # listed (list_profiles), so "no such profile" would contradict
        raise ValueError(f"calibration profile {name!r} of model {model_name!r}: {path} is a link to "
                         f"{os.readlink(path)!r}, which cannot be read (it does not exist): fix or remove the link")
    if not path.is_file():
        have = list_profiles(artifact_dir, model_name)
        raise ValueError(f"model {model_name!r} has no calibration profile {name!r} (looked for {path}; profiles: "
                         f"{', '.join(have) or 'none'})")
    return path


def list_profiles(artifact_dir: str | Path, model_name: str) -> list[str]:
    """The profile names stored for a model, sorted: its ``NAME.json`` files, and links named so even where they
    lead nowhere (reading one then refuses it, naming the file, rather than leaving it out unsaid); a directory
    named so is no profile."""
    d = profiles_dir(artifact_dir, model_name)
    return sorted(p.stem for p in d.glob("*.json") if (p.is_file() or p.is_symlink()) and PROFILE_NAME.match(p.stem)) \
        if d.is_dir() else []


def unnamed_profile_files(artifact_dir: str | Path, model_name: str) -> list[Path]:
    """The ``*.json`` files of a model's profiles folder whose names are no profile name (:data:`PROFILE_NAME`),
    sorted: :func:`list_profiles` leaves them out, so they are never served; ``kevlike serve`` names each in a
    warning."""
    d = profiles_dir(artifact_dir, model_name)
    return sorted(p for p in d.glob("*.json") if not PROFILE_NAME.match(p.stem)) if d.is_dir() else []


def check_profile_target(artifact_dir: str | Path, model_name: str, name: str) -> Path:
    """:func:`profile_path` if a profile can be written there (checked before a fit, so that a fit is not computed
    for nothing).

    Raises:
        ValueError: one line: the profiles folder is a file or cannot be written (nor the nearest folder above it
            that exists, where it would be made), or the profile's path is a directory.
    """
    path = profile_path(artifact_dir, model_name, name)
    for p in (path.parent, *path.parent.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                raise ValueError(f"cannot write profile {name!r}: {p} is not a directory")
            break
    if (p := read_only_folder(path.parent)) is not None:
        raise ValueError(f"cannot write profile {name!r}: {p} cannot be written (a read-only directory or file system)")
    if path.is_dir():
        raise ValueError(f"cannot write profile {name!r}: {path} is a directory")
    return path


def save_profile(artifact_dir: str | Path, model_name: str, name: str, table: TemperatureTable,
                 report: dict | None = None) -> Path:
    """Write profile ``name`` (atomically: a server starting meanwhile never reads half a file).

    Raises:
        OSError: the file cannot be written; the message names it (a full disk's ENOSPC comes without a file name),
            and no temporary file (``.NAME.json.PID.THREAD.tmp``) is left behind.
    """
    path = profile_path(artifact_dir, model_name, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = calibration_json(table, report)   # before the file is opened: a failure leaves no half file
    # a name of its own per writer: two writers of one profile (two `kevlike recalibrate --profile P`) each
    # replace the file whole, never each other's half-written temporary file
    try:
        write_text_atomic(path, text)
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, f"cannot write profile {name!r} to {path}: {e.strerror or e}") from None
    return path


def ensure_embedding_rows(model, n_tokens: int) -> None:
    """Grow the input embeddings to at least ``n_tokens`` rows (new delimiter ids); never shrink a
    matrix that already has more rows than the tokenizer (Qwen pads its vocabulary, PITFALLS.md #7)."""
    rows = model.get_input_embeddings().weight.shape[0]
    if n_tokens > rows:
        model.resize_token_embeddings(n_tokens, mean_resizing=False)
