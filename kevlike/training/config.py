"""Training configuration: YAML files in ``configs/`` over :data:`DEFAULTS`, plus ``key=value``
command-line overrides (dotted keys, YAML-typed values: ``optim.lr=1e-4 tasks.spam.weight=0``)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

from kevlike.data.families import HELDOUT_SOURCES
from kevlike.data.tasks import FAMILY_KEYS, TASKS
from kevlike.model.backbones import cpu_bf16_units

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

DEFAULTS: dict = {
    "name": "run",
    "backbone": "smollm2-135m-instruct",   # registry name or a local HF directory
    "init_from": None,                     # a decision-model directory (or registered name) to fine-tune:
                                           # its LoRA adapter, delimiter rows and head are the starting point
    "seed": 0,
    "output_dir": "runs",
    "device": None,                        # None: what accelerate picks (cuda if present, else cpu)
    "mixed_precision": "auto",             # "auto" | "no" | "bf16": auto = bf16 autocast on CUDA and on CPUs with
                                           # bf16 matrix units (AMX, AVX512-BF16), fp32 elsewhere (resolve_precision)
    "lora": {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": LORA_TARGETS},
    "head": {"d_head": None,               # None: the backbone's hidden size
             "scale_init": True},          # a fresh head (no init_from) divided by RMS of the final norm weight
    "train_delimiters": True,              # the five delimiter embedding rows are trainable
    # task -> sampling weight and augmentation (kevlike.data.sources.make_example)
    "tasks": {
        "banking77": {"weight": 1.0, "negatives": 23, "full_set": 0.0, "perm_twin": 0.25,
                      "irrelevant": 0.1, "noul_twins": 1},
        "spam": {"weight": 0.2},
        "sentiment": {"weight": 0.3},
    },
    "loss": {"perm": 0.5, "ord": 1.0},     # λ_perm (symmetric KL between twins), λ_ord (RPS)
    "data": [],                            # your labelled files, mixed with the tasks above (the replay that keeps
                                           # the built-in skills): [{path: FILE.jsonl, weight: W}], W relative to the
                                           # task weights; a line's own "weight" is its sampling weight in its file
    "set_share": 0.0,                      # share of training requests whose choice questions are read in set
                                           # mode (each option its own sub-branch); > 0 trains both templates
    "optim": {"lr": 3e-4, "head_lr": 1e-3, "weight_decay": 0.01, "warmup": 0.1, "grad_clip": 1.0},
    "batch_size": 4,                       # requests per micro-batch (one packed forward)
    "grad_accum": 1,
    "max_steps": 1000,                     # optimizer steps; the LR schedule spans them
    "max_minutes": None,                   # optional wall-clock stop (the schedule is unchanged)
    "stop_after": None,                    # end this session after N more optimizer steps (checkpointed;
                                           # `kevlike train --resume RUN_DIR` continues the same schedule)
    "eval_every": 200,                     # optimizer steps between validation rounds (and at the end)
    "validation": {"n": 48, "tasks": None, "data": None, "seed": None},  # n per task, from the validation split;
                                           # tasks None: the training tasks; data: a labelled FILE.jsonl validated
                                           # on too (every line); seed: which items (None: the run's seed; fix it
                                           # to compare the validation NLL of runs with different seeds)
    "patience": 3,                         # validation rounds without a better NLL before stopping
    "checkpoint_every": 100,               # optimizer steps between resumable checkpoints (0: off)
}


_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def _numbers(value):
    """PyYAML reads ``1e-4`` (no dot) as a string (YAML 1.1); read it as the float everyone means."""
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        return float(value)
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    return value


class ConfigError(ValueError):
    """A config file or override that names an unknown key or has a bad value."""


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
    return parts, _numbers(yaml.safe_load(value)) if value.strip() else None


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> dict:
    """Resolved config: :data:`DEFAULTS` <- YAML file <- overrides.

    Raises:
        ConfigError: unknown keys, a non-mapping file, or a bad override.
        FileNotFoundError: no such file.
    """
    cfg = copy.deepcopy(DEFAULTS)
    if path is not None:
        data = _numbers(yaml.safe_load(Path(path).read_text()) or {})
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a config must be a YAML mapping")
        cfg = _merge(cfg, data, "")
    for item in overrides:
        parts, value = parse_override(item)
        node = cfg
        for i, p in enumerate(parts[:-1]):
            if not isinstance(node.get(p), dict):
                if parts[0] == "tasks" and i == 1:
                    node[p] = {}
                else:
                    raise ConfigError(f"unknown config key {'.'.join(parts[:i + 1])!r}")
            node = node[p]
        if parts[-1] not in node and parts[0] != "tasks":
            raise ConfigError(f"unknown config key {'.'.join(parts)!r}")
        node[parts[-1]] = value
    if cfg["mixed_precision"] is False:     # YAML 1.1 reads a bare `no` (file or key=value) as false
        cfg["mixed_precision"] = "no"
    if cfg["mixed_precision"] not in ("auto", "no", "bf16"):
        raise ConfigError(f"mixed_precision must be 'auto', 'no' or 'bf16', got {cfg['mixed_precision']!r}")
    for k in ("batch_size", "grad_accum", "max_steps", "eval_every"):
        if not isinstance(cfg[k], int) or isinstance(cfg[k], bool) or cfg[k] < 1:
            raise ConfigError(f"{k} must be a positive integer, got {cfg[k]!r}")

    task_keys = {"weight", "negatives", "full_set", "perm_twin", "irrelevant", "noul_twins", "prompt", "families",
                 *FAMILY_KEYS}
    if not isinstance(cfg["tasks"], dict) or not cfg["tasks"]:
        raise ConfigError("tasks must map at least one task name to its settings")
    for name, opts in cfg["tasks"].items():
        if name not in TASKS:
            raise ConfigError(f"unknown task {name!r} in tasks (known: {', '.join(TASKS)})")
        if not isinstance(opts, dict):
            raise ConfigError(f"tasks.{name} must be a mapping of settings, got {opts!r}")
        if name in HELDOUT_SOURCES and float(opts.get("weight", 1.0)) > 0:
            raise ConfigError(f"tasks.{name}: {name} is a held-out source of the generalization suite and is never "
                              f"trained on (held out: {', '.join(HELDOUT_SOURCES)})")
        for k, v in opts.items():
            if k not in task_keys:
                raise ConfigError(f"unknown config key 'tasks.{name}.{k}' (known: {', '.join(sorted(task_keys))})")
        w = opts.get("weight", 1.0)
        if not isinstance(w, (int, float)) or isinstance(w, bool) or w < 0:
            raise ConfigError(f"tasks.{name}.weight must be a number ≥ 0, got {w!r}")
    if sum(float(o.get("weight", 1.0)) for o in cfg["tasks"].values()) <= 0:
        raise ConfigError("the task weights sum to 0: give at least one task a positive weight")
    if not isinstance(cfg["data"], list):
        raise ConfigError(f"data must be a list of {{path: FILE.jsonl, weight: W}}, got {cfg['data']!r}")
    for i, entry in enumerate(cfg["data"]):
        if not isinstance(entry, dict) or set(entry) - {"path", "weight"} or not isinstance(entry.get("path"), str):
            raise ConfigError(f"data[{i}] must be {{path: FILE.jsonl, weight: W}}, got {entry!r}")
        w = entry.get("weight", 1.0)
        if not isinstance(w, (int, float)) or isinstance(w, bool) or w <= 0:
            raise ConfigError(f"data[{i}].weight must be a number > 0, got {w!r}")
        if not Path(entry["path"]).is_file():
            raise ConfigError(f"data[{i}].path: {entry['path']} does not exist")
    vdata = cfg["validation"]["data"]
    if vdata is not None and (not isinstance(vdata, str) or not Path(vdata).is_file()):
        raise ConfigError(f"validation.data: {vdata!r} is not a labelled file")
    share = cfg["set_share"]
    if not isinstance(share, (int, float)) or isinstance(share, bool) or not 0 <= share <= 1:
        raise ConfigError(f"set_share must be a number from 0 to 1, got {share!r}")
    n_val = cfg["validation"]["n"]
    if not isinstance(n_val, int) or isinstance(n_val, bool) or n_val < 1:
        raise ConfigError(f"validation.n must be a positive integer, got {n_val!r}")
    v_seed = cfg["validation"].get("seed")
    if v_seed is not None and (not isinstance(v_seed, int) or isinstance(v_seed, bool)):
        raise ConfigError(f"validation.seed must be an integer or null, got {v_seed!r}")
    for k, v in cfg["optim"].items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise ConfigError(f"optim.{k} must be a non-negative number, got {v!r}")
    return cfg


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
