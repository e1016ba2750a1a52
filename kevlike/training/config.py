"""Training configuration: YAML files in ``configs/`` over the defaults of
:class:`kevlike.config.train.TrainConfig`, plus ``key=value`` command-line overrides (dotted keys, YAML-typed
values: ``optim.lr=1e-4 tasks.spam.weight=0``); and what needs the other rooms: task names, labelled files, the
device's precision and attention kernel."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from kevlike.config.rules import ConfigError
from kevlike.config.train import TrainConfig
from kevlike.config.yamlfile import read_yaml
from kevlike.data.families import HELDOUT_SOURCES
from kevlike.data.tasks import TASKS
from kevlike.model.precision import cpu_bf16_units


def _read_file(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None


def _merge(base: dict, over: dict, where: str, open_keys: tuple = ("tasks",)) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        path = f"{where}{k}"
        if k not in base and where.rstrip(".") not in open_keys:
            raise ConfigError(f"unknown config key {path!r} (known: {', '.join(sorted(base))})")
        if k == "tasks" and not where:
            out[k] = copy.deepcopy(v)  # a config's task list replaces the default one
        elif isinstance(base.get(k), dict) and isinstance(v, dict):
            out[k] = _merge(base[k], v, f"{path}.", open_keys)
        else:
            out[k] = v
    return out


def parse_override(item: str) -> tuple[list[str], object]:
    """``"optim.lr=1e-4"`` -> ``(["optim", "lr"], 0.0001)``.

    Raises:
        ConfigError: no ``=``, or an empty key.
    """
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not key=value")
    key, value = item.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"override {item!r} has an empty key")
    return parts, read_yaml(value, f"override {item!r}") if value.strip() else None


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> TrainConfig:
    """Resolved config: the defaults <- YAML file <- overrides, checked (:class:`TrainConfig`), with its task
    names known and its labelled files present.

    Raises:
        ConfigError: unknown keys, a non-mapping file, a file or override that is not valid YAML (or repeats a
            key), a bad override or value, an unknown or held-out task, a missing labelled file.
        FileNotFoundError: no such config file.
    """
    raw = TrainConfig().to_dict()
    if path is not None:
        data = read_yaml(_read_file(path), str(path)) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a config must be a YAML mapping")
        raw = _merge(raw, data, "")
    for item in overrides:
        parts, value = parse_override(item)
        node = raw
        for i, p in enumerate(parts[:-1]):
            if not isinstance(node.get(p), dict):
                if parts[0] == "tasks" and i == 1:
                    node[p] = {}
                else:
                    raise ConfigError(f"unknown config key {'.'.join(parts[:i + 1])!r}")
            node = node[p]
        if parts[-1] not in node and parts[0] != "tasks":
            raise ConfigError(f"unknown config key {'.'.join(parts)!r}")
        if parts[0] != "tasks" and isinstance(node[parts[-1]], dict) and isinstance(value, dict):
            value = _merge(node[parts[-1]], value, f"{'.'.join(parts)}.")   # `optim={lr: 1e-4}` sets lr only
        node[parts[-1]] = value
    if raw["mixed_precision"] is False:     # YAML 1.1 reads a bare `no` (file or key=value) as false
        raw["mixed_precision"] = "no"
    config = TrainConfig.from_dict(raw)

    for name in config.tasks:
        if name not in TASKS:
            raise ConfigError(f"unknown task {name!r} in tasks (known: {', '.join(TASKS)})")
        if name in HELDOUT_SOURCES and config.task_weight(name) > 0:
            raise ConfigError(f"tasks.{name}: {name} is a held-out source of the generalization suite and is never "
                              f"trained on (held out: {', '.join(HELDOUT_SOURCES)})")
    for i, entry in enumerate(config.data):
        if not Path(entry.path).is_file():
            raise ConfigError(f"data[{i}].path: {entry.path} does not exist")
    vdata = config.validation.data
    if vdata is not None and not Path(vdata).is_file():
        raise ConfigError(f"validation.data: {vdata!r} is not a labelled file")
    for t in config.validation.tasks or ():
        if t not in TASKS:
            raise ConfigError(f"unknown task {t!r} in validation.tasks (known: {', '.join(TASKS)})")
    return config


def save_run_config(cfg: TrainConfig, run_dir: str | Path) -> Path:
    """Write ``RUN_DIR/config.yaml``: :meth:`TrainConfig.to_dict` as YAML, keys in declaration order."""
    path = Path(run_dir) / "config.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return path


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The config a run directory was started with (``kevlike train --resume``); a key that a run of an older
    kevlike did not save takes its default. Its task names and files are not checked again.

    Raises:
        ConfigError: a key or value the config no longer accepts, no ``config.yaml`` in ``run_dir``, or one
            that is not valid YAML.
    """
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"--resume {run_dir}: not a run directory (no config.yaml in it)")
    data = read_yaml(_read_file(path), str(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a YAML mapping")
    return TrainConfig.from_dict(data)


RESUME_KEYS = ("max_minutes", "stop_after", "eval_every", "checkpoint_every", "patience", "recompute_above",
               "stream")   # stream: the recorded draws are the live ones, so either continues a run
"""The keys a resumed run may change (``kevlike train --resume RUN max_minutes=60``): its budget, its bookkeeping
and its memory, never its recipe (data, model, optimizer, ``max_steps``, which shapes the learning-rate
schedule)."""


SESSION_KEYS = ("stop_after",)
"""The keys that bind one session only: a resumed run starts without them unless its overrides give them again
(a run stopped by ``stop_after=50`` does not stop 50 steps into every later session)."""


def resume_config(run_dir: str | Path, overrides: list[str] = ()) -> TrainConfig:
    """:func:`load_run_config` without :data:`SESSION_KEYS`, with ``overrides`` (``key=value``) of
    :data:`RESUME_KEYS` applied.

    Raises:
        ConfigError: an override of another key (named, with the keys allowed), a bad value (the field named), or
            a run directory without a readable ``config.yaml``.
    """
    raw = load_run_config(run_dir).to_dict()
    for key in SESSION_KEYS:
        raw[key] = None
    for item in overrides:
        parts, value = parse_override(item)
        key = ".".join(parts)
        if key not in RESUME_KEYS:
            raise ConfigError(f"override {item!r}: a resumed run keeps its recipe; only its budget may change "
                              f"({', '.join(RESUME_KEYS)})")
        raw[key] = value
    return TrainConfig.from_dict(raw)


def resolve_precision(setting: str, cuda: bool, cpuinfo: str | None = None) -> tuple[str, str]:
    """``(precision, reason)`` for a ``mixed_precision`` setting: ``auto`` picks ``bf16`` on CUDA and on CPUs
    with bf16 units (:func:`cpu_bf16_units`), ``no`` (fp32) elsewhere — on an AVX2-only CPU a bf16 autocast
    training step measured ~20× slower than fp32, on an AMD EPYC Zen 4 with AVX512-BF16 1.24× faster
    (configs/README.md)."""
    if setting != "auto":
        return setting, f"set in the config ({setting})"
    if cuda:
        return "bf16", "auto: CUDA device"
    units = cpu_bf16_units(cpuinfo)
    if units:
        return "bf16", f"auto: CPU has {', '.join(units)}"
    return "no", "auto: CPU has no bf16 matrix units (no amx_bf16/avx512_bf16 flag): fp32"


def resolve_attention(setting: str, device: str, phase: str = "full") -> tuple[str, str]:
    """``(backend, reason)`` for an ``attention`` setting on a training ``device`` (``"cuda"``, ``"cuda:0"``,
    ``"cpu"``, ...): ``auto`` picks ``flex_attention`` on CUDA — the same ``mask_mod`` as serving, as a
    ``BlockMask`` (:func:`kevlike.model.kernels.masks.block_mask`), so fully masked tiles are skipped and no
    ``[B, 1, L, L]`` mask is built — and ``sdpa`` with the dense mask elsewhere.

    Raises:
        ConfigError: ``flex_attention`` with ``phase: full`` on a device where FlexAttention has no backward
            (:func:`kevlike.model.kernels.flex_backward_error`, measured: the CPU with torch 2.13). ``phase: head``
            runs the backbone without autograd, so flex works there — for checks (tests, ``kevlike gpu-check``):
            transformers compiles flex, and torch 2.13's CPU kernel failed on a recompile for a second length with
            dynamic shapes (index out of bounds), so a CPU run over many lengths is not supported.
    """
    from kevlike.model.kernels import flex_backward_error

    cuda = str(device).startswith("cuda")
    if setting == "auto":
        return ("flex_attention", "auto: CUDA device") if cuda else ("sdpa", f"auto: {device} (dense mask)")
    if setting == "flex_attention" and phase not in ("head", "abstain") and (err := flex_backward_error(device)) is not None:
        raise ConfigError(f"attention: flex_attention cannot train on {device}: {err}; use attention=sdpa or auto, "
                          f"or phase=head (no backward through the backbone)")
    return setting, f"set in the config ({setting})"


def stream_settings(cfg: TrainConfig) -> dict:
    """What a recorded stream's draws depend on (:func:`kevlike.training.train.record_stream`): the seed, the tasks and their
    augmentation, the labelled files and the validation section."""
    d = cfg.to_dict()
    return {"seed": cfg.seed, "tasks": d["tasks"], "data": d["data"], "config": {"validation": d["validation"]}}
