"""Training configuration: YAML files in ``configs/`` over :data:`DEFAULTS`, plus ``key=value``
command-line overrides (dotted keys, YAML-typed values: ``optim.lr=1e-4 tasks.spam.weight=0``)."""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from kevlike.data.families import HELDOUT_SOURCES
from kevlike.data.tasks import TASKS
from kevlike.model.precision import cpu_bf16_units

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
    "attention": "auto",                   # "auto" | "sdpa" | "flex_attention": the attention kernel of training and
                                           # validation; auto = flex_attention with a BlockMask on CUDA (fully masked
                                           # tiles skipped), sdpa with the dense [B, 1, L, L] mask elsewhere
                                           # (resolve_attention; flex has no backward on the CPU)
    "lora": {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": LORA_TARGETS},
    "head": {"d_head": None,               # None: the backbone's hidden size
             "scale_init": True,           # a fresh head (no init_from) divided by RMS of the final norm weight
             "abstain": False},            # add the none key that reads x_abstain (docs/guide/abstention.md); kept
                                           # anyway when init_from's head has it
    "train_delimiters": True,              # the five delimiter embedding rows are trainable
    "phase": "full",                       # "full": LoRA, delimiter rows and head; "head": phase A of the design,
                                           # the pointer head alone on a frozen backbone (LoRA and delimiter rows
                                           # frozen, their forward under no_grad, no backward through them):
                                           # the cheap check that the pipeline learns at all; "abstain": the head's
                                           # none key alone (w_none, b_none; needs head.abstain): every Jev answer
                                           # of the model it starts from stays bit-identical, only x_abstain learns
    # task -> sampling weight and augmentation (kevlike.data.sources.make_example)
    "tasks": {
        "banking77": {"weight": 1.0, "negatives": 23, "full_set": 0.0, "perm_twin": 0.25,
                      "irrelevant": 0.1, "noul_twins": 1},
        "spam": {"weight": 0.2},
        "sentiment": {"weight": 0.3},
    },
    "loss": {"perm": 0.5, "ord": 1.0,      # λ_perm (symmetric KL between twins), λ_ord (RPS)
             "abstain": 0.0},              # λ_abstain: BCE of x_abstain (1: "cannot tell" questions, 0: the rest);
                                           # > 0 needs head.abstain; the option CE then skips "cannot tell" ones
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


@dataclass(frozen=True)
class Rule:
    """What one config key accepts: ``kind`` ``int`` (a YAML integer, never a bool), ``number`` (an int or a
    finite float), ``bool``, ``str`` (non-empty), ``names`` (a non-empty list of non-empty strings) or ``choice``
    (one of ``choices``); numbers within ``lo``..``hi`` (``lo_open``/``hi_open``: the bound itself excluded);
    ``null``: None is accepted too. :meth:`text` is the rule in words, as the error message states it."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    null: bool = False
    choices: tuple = ()

    def accepts(self, v) -> bool:
        if v is None:
            return self.null
        if self.kind == "bool":
            return isinstance(v, bool)
        if self.kind == "str":
            return isinstance(v, str) and bool(v.strip())
        if self.kind == "names":
            return isinstance(v, list) and bool(v) and all(isinstance(x, str) and x.strip() for x in v)
        if self.kind == "choice":
            return v in self.choices
        if isinstance(v, bool) or not isinstance(v, int if self.kind == "int" else (int, float)):
            return False
        if not math.isfinite(v):
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return self.hi is None or (v < self.hi if self.hi_open else v <= self.hi)

    def text(self) -> str:
        if self.kind in ("bool", "str", "names", "choice"):
            words = {"bool": "true or false", "str": "a non-empty string", "names": "a non-empty list of names",
                     "choice": " or ".join(repr(c) for c in self.choices)}[self.kind]
        else:
            words = "an integer" if self.kind == "int" else "a finite number"
            if self.lo is not None and self.hi is not None:
                words += (f" from {_fmt(self.lo)} to {_fmt(self.hi)}" + (f" (below {_fmt(self.hi)})" if self.hi_open
                                                                          else "")
                          + (f" (above {_fmt(self.lo)})" if self.lo_open else ""))
            elif self.lo is not None:
                words += f" {'>' if self.lo_open else '≥'} {_fmt(self.lo)}"
        return words + (" or null" if self.null else "")


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _int(lo=None, hi=None, null=False) -> Rule:
    return Rule("int", lo, hi, null=null)


def _num(lo=None, hi=None, lo_open=False, hi_open=False, null=False) -> Rule:
    return Rule("number", lo, hi, lo_open, hi_open, null)


_SHARE = _num(0, 1)       # a probability or a share
_SEED = 2 ** 32 - 1        # numpy's seed range (accelerate's set_seed seeds numpy too)

# Every key of DEFAULTS (dotted), what it accepts. load_config checks each resolved value against its rule
# before anything loads; tests/test_training.py checks that every key of DEFAULTS has one.
RULES: dict[str, Rule] = {
    "name": Rule("str"),
    "backbone": Rule("str"),
    "init_from": Rule("str", null=True),
    "seed": _int(0, _SEED),
    "output_dir": Rule("str"),
    "device": Rule("str", null=True),
    "mixed_precision": Rule("choice", choices=("auto", "no", "bf16")),
    "attention": Rule("choice", choices=("auto", "sdpa", "flex_attention")),
    "lora.r": _int(1),
    "lora.alpha": _num(0, lo_open=True),
    "lora.dropout": _num(0, 1, hi_open=True),
    "lora.target_modules": Rule("names"),
    "head.d_head": _int(1, null=True),
    "head.scale_init": Rule("bool"),
    "head.abstain": Rule("bool"),
    "train_delimiters": Rule("bool"),
    "phase": Rule("choice", choices=("full", "head", "abstain")),
    "loss.perm": _num(0),
    "loss.ord": _num(0),
    "loss.abstain": _num(0),
    "set_share": _SHARE,
    "optim.lr": _num(0),
    "optim.head_lr": _num(0),
    "optim.weight_decay": _num(0),
    "optim.warmup": _SHARE,               # a share of max_steps
    "optim.grad_clip": _num(0, lo_open=True),
    "batch_size": _int(1),
    "grad_accum": _int(1),
    "max_steps": _int(1),
    "max_minutes": _num(0, lo_open=True, null=True),
    "stop_after": _int(1, null=True),
    "eval_every": _int(1),
    "validation.n": _int(1),
    "validation.tasks": Rule("names", null=True),
    "validation.data": Rule("str", null=True),
    "validation.seed": _int(0, _SEED, null=True),
    "patience": _int(1),
    "checkpoint_every": _int(0),
}
# tasks.NAME.KEY (kevlike.data.tasks.make_example passes them on to the example builders)
TASK_RULES: dict[str, Rule] = {
    "weight": _num(0),
    "negatives": _int(1, null=True),      # None: every label
    "full_set": _SHARE, "perm_twin": _SHARE, "irrelevant": _SHARE,
    "noul_twins": _int(0),
    "prompt": _int(0, null=True),
    "families": Rule("bool"),
    "max_questions": _int(1),
    "distractor": _SHARE, "coherence": _SHARE, "wrap_negation": _SHARE, "insert_not": _SHARE,
    "negation": Rule("bool"), "augment": Rule("bool"), "soft_scores": Rule("bool"),
    "long": _SHARE,
}
_OPEN = ("tasks", "data")   # top-level keys checked below, not by RULES


def _check(key: str, value, rule: Rule) -> None:
    if not rule.accepts(value):
        raise ConfigError(f"{key} must be {rule.text()}, got {value!r}")


def check_rules(cfg: dict) -> None:
    """Check every key of ``cfg`` that :data:`RULES` declares (sections first: ``lora: 5`` is not a mapping).

    Raises:
        ConfigError: one line, ``KEY must be RULE, got VALUE``.
    """
    for k, v in DEFAULTS.items():
        if isinstance(v, dict) and k not in _OPEN and not isinstance(cfg.get(k), dict):
            raise ConfigError(f"{k} must be a mapping of {', '.join(v)}, got {cfg.get(k)!r}")
    for key, rule in RULES.items():
        section, _, leaf = key.rpartition(".")
        node = cfg[section] if section else cfg
        _check(key, node.get(leaf, DEFAULTS[section][leaf] if section else DEFAULTS[leaf]), rule)


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
        if parts[0] != "tasks" and isinstance(node[parts[-1]], dict) and isinstance(value, dict):
            value = _merge(node[parts[-1]], value, f"{'.'.join(parts)}.")   # `optim={lr: 1e-4}` sets lr only
        node[parts[-1]] = value
    if cfg["mixed_precision"] is False:     # YAML 1.1 reads a bare `no` (file or key=value) as false
        cfg["mixed_precision"] = "no"
    check_rules(cfg)

    if cfg["phase"] == "abstain" and not (cfg["head"]["abstain"] and cfg["loss"]["abstain"] > 0):
        raise ConfigError("phase is 'abstain' (the none key alone learns) but head.abstain is false or loss.abstain "
                          "is 0: set head.abstain: true and loss.abstain > 0")
    if cfg["loss"]["abstain"] > 0 and not cfg["head"]["abstain"]:
        raise ConfigError(f"loss.abstain is {cfg['loss']['abstain']:g} but head.abstain is false: the abstention "
                          f"loss trains the head's none key (set head.abstain: true)")
    task_keys = set(TASK_RULES)
    if not isinstance(cfg["tasks"], dict) or not cfg["tasks"]:
        raise ConfigError("tasks must map at least one task name to its settings")
    for name, opts in cfg["tasks"].items():
        if name not in TASKS:
            raise ConfigError(f"unknown task {name!r} in tasks (known: {', '.join(TASKS)})")
        if not isinstance(opts, dict):
            raise ConfigError(f"tasks.{name} must be a mapping of settings, got {opts!r}")
        for k, v in opts.items():
            if k not in task_keys:
                raise ConfigError(f"unknown config key 'tasks.{name}.{k}' (known: {', '.join(sorted(task_keys))})")
            _check(f"tasks.{name}.{k}", v, TASK_RULES[k])
        if name in HELDOUT_SOURCES and float(opts.get("weight", 1.0)) > 0:
            raise ConfigError(f"tasks.{name}: {name} is a held-out source of the generalization suite and is never "
                              f"trained on (held out: {', '.join(HELDOUT_SOURCES)})")
    if sum(float(o.get("weight", 1.0)) for o in cfg["tasks"].values()) <= 0:
        raise ConfigError("the task weights sum to 0: give at least one task a positive weight")
    if not isinstance(cfg["data"], list):
        raise ConfigError(f"data must be a list of {{path: FILE.jsonl, weight: W}}, got {cfg['data']!r}")
    for i, entry in enumerate(cfg["data"]):
        if not isinstance(entry, dict) or set(entry) - {"path", "weight"} or not isinstance(entry.get("path"), str):
            raise ConfigError(f"data[{i}] must be {{path: FILE.jsonl, weight: W}}, got {entry!r}")
        _check(f"data[{i}].weight", entry.get("weight", 1.0), _num(0, lo_open=True))
        if not Path(entry["path"]).is_file():
            raise ConfigError(f"data[{i}].path: {entry['path']} does not exist")
    vdata = cfg["validation"]["data"]
    if vdata is not None and (not isinstance(vdata, str) or not Path(vdata).is_file()):
        raise ConfigError(f"validation.data: {vdata!r} is not a labelled file")
    for t in cfg["validation"]["tasks"] or ():
        if t not in TASKS:
            raise ConfigError(f"unknown task {t!r} in validation.tasks (known: {', '.join(TASKS)})")
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
