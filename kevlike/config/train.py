"""The training config: :class:`TrainConfig` and its sections, each setting declared once (default, rule, help).

``kevlike train configs/NAME.yaml key=value ...`` resolves one (:func:`kevlike.training.config.load_config`: the
file over these defaults, then the overrides) and the trainer reads it by attribute (``cfg.optim.lr``). A run
directory's ``config.yaml`` and an artifact's manifest hold :meth:`TrainConfig.to_dict`, and
:meth:`TrainConfig.from_dict` reads them back (``kevlike train --resume``); a key that a config saved by an
older kevlike lacks takes its default. What needs the other rooms — that task names exist, that labelled files
exist — is checked in :mod:`kevlike.training.config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kevlike.config.rules import (SEED, SHARE, ConfigError, FrozenMap, Rule, Section, integer, number, section,
                                  setting, settings)

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
READOUTS = ("pointer", "lm")
"""How a trained model reads its answers (``readout``): its pointer head, or the backbone's LM readout."""

# tasks.NAME.KEY: what each option of a task accepts and means; kevlike.data.tasks.make_example passes them on to
# the example builders, whose defaults apply where a config leaves an option out (so an option has no default here)
TASK_OPTIONS: dict[str, tuple[Rule, str]] = {
    "weight": (number(0), "sampling weight of the task, relative to the other tasks' and the data files' (default 1)"),
    "negatives": (integer(1, null=True), "intents: wrong options sampled per question, the gold one always present "
                                         "(null: every label)"),
    "full_set": (SHARE, "intents: probability of asking over all labels instead"),
    "perm_twin": (SHARE, "probability of a twin question with the options in another order (feeds loss.perm)"),
    "irrelevant": (SHARE, "probability of appending an option from another dataset's labels"),
    "noul_twins": (integer(0), 'up to this many "is this about X?" yes/no questions on the same state'),
    "prompt": (integer(0, null=True), "which of the task's fixed prompts asks the question (null: one drawn at "
                                      "random)"),
    "families": (Rule("bool"), "true: build a legacy task's requests with the question families instead (family "
                               "sources always are)"),
    "max_questions": (integer(1), "families: up to this many questions per request (mixed families; default 4)"),
    "distractor": (SHARE, "families: probability of a distractor option from another source in a choice "
                          "(default 0.15)"),
    "coherence": (SHARE, "families: probability that a yes/no question gets a coherence twin in the same request, "
                         "tied to it by loss.perm (default 0)"),
    "wrap_negation": (SHARE, "families: probability that a yes/no question is wrapped in a frame that negates it, "
                             "its answer swapped (default 0)"),
    "insert_not": (SHARE, 'families: probability that a plain yes/no question is asked with "not" after its '
                          "subject, its answer swapped (default 0)"),
    "negation": (Rule("bool"), "families: false drops negated yes/no phrasings (ablation)"),
    "augment": (Rule("bool"), "families: false keeps one wording per family, word keys and no distractors "
                              "(ablation)"),
    "soft_scores": (Rule("bool"), "families on VADER sources: a score question's target is the share of the "
                                  "snippet's raters in each level instead of one-hot (default false)"),
    "long": (SHARE, "typed sources: probability that the state is padded into a page of unrelated paragraphs "
                    "(default 0)"),
}

DEFAULT_TASKS = {
    "banking77": {"weight": 1.0, "negatives": 23, "full_set": 0.0, "perm_twin": 0.25, "irrelevant": 0.1,
                  "noul_twins": 1},
    "spam": {"weight": 0.2},
    "sentiment": {"weight": 0.3},
}

_DATA_WEIGHT = number(0, lo_open=True)


@settings("lora")
class LoraConfig(Section):
    """The LoRA adapter on the backbone's linear layers (peft)."""

    r: int = setting(16, integer(1), "rank of the adapter's A and B matrices")
    alpha: float = setting(32, number(0, lo_open=True), "scaling numerator: the update B·A is scaled by alpha / r")
    dropout: float = setting(0.0, number(0, 1, hi_open=True), "dropout probability on the adapter's input")
    target_modules: tuple[str, ...] = setting(LORA_TARGETS, Rule("names"), "names of the linear layers of each "
                                              "decoder layer that get an adapter")


@settings("head")
class HeadConfig(Section):
    """The pointer head (:class:`kevlike.model.heads.PointerHead`)."""

    d_head: int | None = setting(None, integer(1, null=True), "width of the head's query and key projections "
                                 "(null: the backbone's hidden size)")
    scale_init: bool = setting(True, Rule("bool"), "a fresh head (no init_from) divided by the RMS of the final "
                               "norm weight, so its first logits have the same size on every backbone")
    abstain: bool = setting(False, Rule("bool"), "add the none key that reads x_abstain (docs/guide/abstention.md); "
                            "kept anyway when init_from's head has it; with readout: lm, read x_abstain from the "
                            "none answer (\" cannot tell\") scored like an option instead")


@settings("loss")
class LossConfig(Section):
    """The weights λ of the loss terms beside the option cross-entropy (:func:`kevlike.training.train.loss_terms`)."""

    perm: float = setting(0.5, number(0), "λ_perm: symmetric KL between twin questions")
    ord: float = setting(1.0, number(0), "λ_ord: ranked probability score of score questions")
    readout: float = setting(0.0, number(0), 'λ_readout: log loss of score questions under the "normal" readout, '
                             "which serves the level nearest the mean (kevlike.training.losses.normal_readout_nll)")
    abstain: float = setting(0.0, number(0), 'λ_abstain: BCE of x_abstain (1: "cannot tell" questions, 0: the '
                             'rest); > 0 needs head.abstain; the option CE then skips "cannot tell" ones')


@settings("distill")
class DistillConfig(Section):
    """Knowledge distillation (Hinton et al. 2015, "Distilling the Knowledge in a Neural Network",
    arXiv:1503.02531): a teacher decision model answers every training request (no gradient) and its calibrated
    distributions become a second target of the option cross-entropy (:func:`kevlike.training.train.loss_terms`)."""

    teacher: str | None = setting(None, Rule("str", null=True), "a decision model (registered name, directory, or "
                                  "an ensemble such as kevlike-ensemble) whose calibrated answers are the soft "
                                  "targets; null: no distillation")
    weight: float = setting(0.0, number(0), "λ_distill: the weight of the cross-entropy against the teacher's "
                            "distribution, beside the gold target's (weight 1); > 0 needs a teacher")
    dtype: str = setting("auto", Rule("choice", choices=("auto", "float32", "bfloat16")), "the teacher's weight "
                         "precision (auto: bfloat16 on CPUs with bf16 matrix units and on CUDA, else float32)")


@settings("optim")
class OptimConfig(Section):
    """AdamW and its schedule: linear warmup, then linear decay to 0 at ``max_steps``."""

    lr: float = setting(3e-4, number(0), "peak learning rate of the LoRA matrices")
    head_lr: float = setting(1e-3, number(0), "peak learning rate of the head and the delimiter rows")
    weight_decay: float = setting(0.01, number(0), "AdamW's decoupled weight decay")
    warmup: float = setting(0.1, SHARE, "share of max_steps over which the learning rate rises from 0")
    grad_clip: float = setting(1.0, number(0, lo_open=True), "largest global L2 norm of the gradients of an "
                               "optimizer step (clipped to it)")


@settings("validation")
class ValidationConfig(Section):
    """The validation rounds that select the artifact (the best NLL) and stop early."""

    n: int = setting(48, integer(1), "items per task, from its validation split")
    tasks: tuple[str, ...] | None = setting(None, Rule("names", null=True), "the tasks validated on (null: the "
                                            "training tasks)")
    data: str | None = setting(None, Rule("str", null=True), "a labelled FILE.jsonl validated on too (every line)")
    seed: int | None = setting(None, integer(0, SEED.hi, null=True), "which items are drawn (null: the run's seed; "
                               "fix it to compare the validation NLL of runs with different seeds)")


@dataclass(frozen=True)
class DataFile:
    """One of ``data``: a labelled file (:mod:`kevlike.data.labelled`) mixed with the tasks. ``path``: the
    ``FILE.jsonl``; ``weight``: its sampling weight relative to the task weights, > 0 (None: not given, 1; a
    line's own ``weight`` is its weight within the file). :class:`TrainConfig` checks its entries."""

    path: str
    weight: float | None = None

    def to_dict(self) -> dict:
        return {"path": self.path} if self.weight is None else {"path": self.path, "weight": self.weight}


def _data_file(i: int, entry) -> DataFile:
    if isinstance(entry, DataFile):
        entry = entry.to_dict()
    if not isinstance(entry, Mapping) or set(entry) - {"path", "weight"} or not isinstance(entry.get("path"), str):
        raise ConfigError(f"data[{i}] must be {{path: FILE.jsonl, weight: W}}, got {entry!r}")
    _DATA_WEIGHT.check(f"data[{i}].weight", entry.get("weight", 1.0))
    return DataFile(**entry)


@settings()
class TrainConfig(Section):
    """A resolved training config (``kevlike train``): frozen, checked on construction. Change one with
    ``dataclasses.replace(cfg, max_steps=10)`` or ``replace(cfg, optim=replace(cfg.optim, lr=1e-4))``.

    ``tasks`` is a read-only mapping ``{task: {option: value}}`` (the options of :data:`TASK_OPTIONS`, only those
    given); ``data`` a tuple of :class:`DataFile` (a mapping ``{path, weight}`` is accepted too).

    Raises (on construction, or :meth:`from_dict`):
        ConfigError: a value its rule refuses, an unknown key (task options included), a section or task that is
            not a mapping, no task or task weights that sum to 0, a bad ``data`` entry, ``phase: abstain`` without
            ``head.abstain`` and ``loss.abstain`` > 0, ``loss.abstain`` > 0 without ``head.abstain``, or
            ``distill.weight`` > 0 without ``distill.teacher`` or a teacher at weight 0, or ``readout: lm`` with
            a ``phase`` other than full or ``set_share`` > 0.
    """

    name: str = setting("run", Rule("str"), "the run's name: its directory is OUTPUT_DIR/NAME-YYYYmmdd-HHMMSS")
    backbone: str = setting("smollm2-135m-instruct", Rule("str"), "registry name or a local HF directory")
    init_from: str | None = setting(None, Rule("str", null=True), "a decision-model directory (or registered name) "
                                    "to fine-tune: its LoRA adapter, delimiter rows and head are the starting point")
    seed: int = setting(0, SEED, "seeds Python, NumPy and torch, the data stream and (by default) the validation "
                        "items")
    output_dir: str = setting("runs", Rule("str"), "where run directories are made")
    device: str | None = setting(None, Rule("str", null=True), "null: what accelerate picks (cuda if present, "
                                 "else cpu)")
    mixed_precision: str = setting("auto", Rule("choice", choices=("auto", "no", "bf16")),
                                   "auto = bf16 autocast on CUDA and on CPUs with bf16 matrix units (AMX, "
                                   "AVX512-BF16), fp32 elsewhere (resolve_precision); no = fp32")
    attention: str = setting("auto", Rule("choice", choices=("auto", "sdpa", "flex_attention")),
                             "the attention kernel of training and validation; auto = flex_attention with a "
                             "BlockMask on CUDA (fully masked tiles skipped), sdpa with the dense [B, 1, L, L] "
                             "mask elsewhere (resolve_attention; flex has no backward on the CPU)")
    lora: LoraConfig = section(LoraConfig, "the LoRA adapter")
    head: HeadConfig = section(HeadConfig, "the pointer head")
    readout: str = setting("pointer", Rule("choice", choices=READOUTS),
                           "how answers are read: pointer (the pointer head at each <decide>, on the delimiter "
                           "template) or lm (no head: the backbone's own mean log-probability of each option's "
                           "answer text, the LM readout, on the plain-text template; LoRA alone learns, starting "
                           "from the untrained backbone's zero-shot answers; phase full, set_share 0; head.abstain "
                           "reads x_abstain from a none answer)")
    train_delimiters: bool = setting(True, Rule("bool"), "the five delimiter embedding rows are trainable (pointer "
                                     "readout; the LM readout's template has no delimiter)")
    phase: str = setting("full", Rule("choice", choices=("full", "head", "abstain")),
                         "full: LoRA, delimiter rows and head; head: phase A of the design, the pointer head alone "
                         "on a frozen backbone (its forward under no_grad, no backward through it): the cheap check "
                         "that the pipeline learns at all; abstain: the head's none key alone (w_none, b_none; "
                         "needs head.abstain): every answer of the model it starts from stays bit-identical, only "
                         "x_abstain learns")
    tasks: Mapping[str, Mapping] = setting(DEFAULT_TASKS, None, "task -> sampling weight and augmentation "
                                           "(TASK_OPTIONS); a config's tasks replace these")
    loss: LossConfig = section(LossConfig, "the loss weights")
    distill: DistillConfig = section(DistillConfig, "the teacher model of knowledge distillation (off by default)")
    data: tuple[DataFile, ...] = setting((), None, "your labelled files, mixed with the tasks (the replay that keeps "
                                         "the built-in skills): [{path: FILE.jsonl, weight: W}], W relative to the "
                                         "task weights")
    stream: str | None = setting(None, Rule("str", null=True), "a recorded stream of this config's draws "
                                 "(`kevlike train CONFIG --record-stream FILE`): training and validation examples "
                                 "are read from it instead of the data packages (a machine without them, e.g. a "
                                 "lent GPU); the same examples in the same order")
    set_share: float = setting(0.0, SHARE, "share of training requests whose choice questions are read in set mode "
                               "(each option its own sub-branch); > 0 trains both templates")
    optim: OptimConfig = section(OptimConfig, "the optimizer")
    batch_size: int = setting(4, integer(1), "requests per micro-batch (one packed forward)")
    grad_accum: int = setting(1, integer(1), "micro-batches per optimizer step")
    max_steps: int = setting(1000, integer(1), "optimizer steps; the LR schedule spans them")
    max_minutes: float | None = setting(None, number(0, lo_open=True, null=True), "optional wall-clock stop, in "
                                        "minutes (the schedule is unchanged)")
    stop_after: int | None = setting(None, integer(1, null=True), "end this session after N more optimizer steps "
                                     "(checkpointed; `kevlike train --resume RUN_DIR` continues the same schedule)")
    eval_every: int = setting(200, integer(1), "optimizer steps between validation rounds (and one at the end)")
    validation: ValidationConfig = section(ValidationConfig, "the validation rounds")
    patience: int = setting(3, integer(1), "validation rounds without a better NLL before stopping")
    checkpoint_every: int = setting(100, integer(0), "optimizer steps between resumable checkpoints (0: off)")
    recompute_above: int | None = setting(2048, integer(0, null=True), "activation checkpointing for micro-batches "
                                          "of more than this many tokens (padded batch x length): their decoder "
                                          "layers are recomputed in the backward, so a long page fits in memory at "
                                          "about 1.3x its step time; same gradients; 0: every batch, null: never")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.phase == "abstain" and not (self.head.abstain and self.loss.abstain > 0):
            raise ConfigError("phase is 'abstain' (the none key alone learns) but head.abstain is false or "
                              "loss.abstain is 0: set head.abstain: true and loss.abstain > 0")
        if self.loss.abstain > 0 and not self.head.abstain:
            raise ConfigError(f"loss.abstain is {self.loss.abstain:g} but head.abstain is false: the abstention "
                              f"loss trains the head's none key (set head.abstain: true)")
        if self.readout == "lm":
            for bad, why in ((self.phase != "full", f"phase is {self.phase!r} (phases head and abstain train a "
                                                    f"pointer head; the LM readout has none)"),
                             (self.set_share > 0, f"set_share is {self.set_share:g} (the LM readout reads every "
                                                  f"option in its own sub-branch already)")):
                if bad:
                    raise ConfigError(f"readout is 'lm' but {why}")
        if self.distill.weight > 0 and not self.distill.teacher:
            raise ConfigError(f"distill.weight is {self.distill.weight:g} but distill.teacher is null: name the "
                              f"teacher model (e.g. kevlike-ensemble)")
        if self.distill.teacher and self.distill.weight <= 0:
            raise ConfigError(f"distill.teacher is {self.distill.teacher!r} but distill.weight is 0: the teacher "
                              f"would not be used (set distill.weight > 0, e.g. 1.0, or distill.teacher: null)")
        object.__setattr__(self, "tasks", _tasks(self.tasks))
        if not isinstance(self.data, (list, tuple)):
            raise ConfigError(f"data must be a list of {{path: FILE.jsonl, weight: W}}, got {self.data!r}")
        object.__setattr__(self, "data", tuple(_data_file(i, e) for i, e in enumerate(self.data)))

    def task_weight(self, name: str) -> float:
        """The sampling weight of task ``name`` (1 where its options leave it out)."""
        return float(self.tasks[name].get("weight", 1.0))


def _tasks(tasks) -> Mapping[str, Mapping]:
    """``tasks`` checked and read-only."""
    if not isinstance(tasks, Mapping) or not tasks:
        raise ConfigError("tasks must map at least one task name to its settings")
    out = {}
    for name, opts in tasks.items():
        if not isinstance(opts, Mapping):
            raise ConfigError(f"tasks.{name} must be a mapping of settings, got {opts!r}")
        for k, v in opts.items():
            if k not in TASK_OPTIONS:
                raise ConfigError(f"unknown config key 'tasks.{name}.{k}' (known: {', '.join(sorted(TASK_OPTIONS))})")
            TASK_OPTIONS[k][0].check(f"tasks.{name}.{k}", v)
        out[name] = FrozenMap(opts)
    if sum(float(o.get("weight", 1.0)) for o in out.values()) <= 0:
        raise ConfigError("the task weights sum to 0: give at least one task a positive weight")
    return FrozenMap(out)

