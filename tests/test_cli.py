"""`kevlike` console script: bad input exits 2 with one line and no traceback; a real decide run."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def run(*args, stdin: bytes | None = None):
    return subprocess.run([sys.executable, "-m", "kevlike", *args], input=stdin, capture_output=True, timeout=600)


@pytest.mark.parametrize("body", [b"{not json", b'{"state": "s", "questions": {}}',
                                  b'{"state": "s", "questions": {"a": {"type": "score", "instructions": "x", "criteria": {"0": "lo", "1": "hi"}}}}'])
def test_bad_request_exits_2_with_one_line(body):
    p = run("decide", "-", stdin=body)
    assert p.returncode == 2
    err = p.stderr.decode().strip()
    assert err.startswith("kevlike: error: invalid request:") and "\n" not in err and "Traceback" not in err
    assert p.stdout == b""


def test_missing_file_and_unknown_model_exit_2(tmp_path):
    p = run("decide", str(tmp_path / "nope.json"))
    assert p.returncode == 2 and "cannot read" in p.stderr.decode()
    req = tmp_path / "r.json"
    req.write_text(json.dumps({"state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}}))
    p = run("decide", str(req), "--model", str(tmp_path / "no-such-model"))
    assert p.returncode == 2 and "unknown model" in p.stderr.decode() and "Traceback" not in p.stderr.decode()


@pytest.mark.backbone
def test_decide_example_end_to_end(backbone_engine):
    path = ROOT / "examples" / "review.json"
    # one thread: on a 2-core Xeon with AMX a fresh process's packed float32 pass at 2 threads gave 0.275880 or
    # 0.275771 for one answer (1.1e-4 apart, run to run; stable at 1 thread and within one process; not yet explained)
    p = run("decide", str(path), "--compact", "--threads", "1")
    assert p.returncode == 0, p.stderr.decode()
    out = json.loads(p.stdout)
    assert out["model"] == "kevlike-default" and set(out["answers"]) == set(json.loads(path.read_text())["questions"])
    # the same answers through stdin, and the separate reference mode agrees
    p2 = run("decide", "-", "--mode", "separate", "--compact", "--threads", "1", stdin=path.read_bytes())
    from test_parity import max_abs_diff

    assert max_abs_diff(out, json.loads(p2.stdout)) <= 1e-5


def test_hub_id_without_hub_is_a_clear_error(tmp_path, monkeypatch):
    req = tmp_path / "r.json"
    req.write_text(json.dumps({"state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    p = run("decide", str(req), "--model", "HuggingFaceTB/SmolLM2-135M-Instruct")
    err = p.stderr.decode()
    assert p.returncode == 2 and "cannot load model 'HuggingFaceTB/SmolLM2-135M-Instruct'" in err, err
    assert "Traceback" not in err


# -- start-up cost, help texts, terminal encodings, option orders ------------------------------------

def test_help_and_invalid_request_do_not_import_torch(tmp_path):
    """`kevlike --help`, `kevlike decide --help` and an invalid request need no model, so no torch."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"state": "s", "questions": {}}')
    code = f"""
import contextlib, io, sys
from kevlike.cli import main
for argv in (["--help"], ["decide", "--help"], ["serve", "--help"], ["--version"]):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as e:
            assert e.code == 0, (argv, e.code)
assert main(["decide", {str(bad)!r}]) == 2
import kevlike
assert kevlike.__version__ and "Engine" in dir(kevlike)
heavy = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
assert not heavy, heavy[:5]
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert p.returncode == 0 and p.stdout.decode().strip() == "ok", p.stderr.decode()
    assert p.stderr.decode().startswith("kevlike: error: invalid request:")


def test_lazy_package_names_are_the_real_ones():
    import kevlike
    from kevlike import DEFAULT_MODEL, Engine, ModelNotFoundError, SetupError
    from kevlike.model import backbones, engine

    assert Engine is engine.Engine and kevlike.Engine is engine.Engine
    assert (DEFAULT_MODEL, ModelNotFoundError, SetupError) == (backbones.DEFAULT_MODEL, backbones.ModelNotFoundError,
                                                               backbones.SetupError)
    assert set(kevlike.__all__) <= set(dir(kevlike))
    with pytest.raises(AttributeError, match="no_such_name"):
        kevlike.no_such_name  # noqa: B018


def _subparsers(parser):
    import argparse

    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_option_has_help_and_shows_its_default():
    import argparse

    from kevlike.cli import build_parser

    parser = build_parser()
    commands = _subparsers(parser)
    assert {"decide", "fetch", "models", "serve", "bench", "train", "eval", "calibrate", "recalibrate", "probes",
            "parity", "loadtest", "fuzz"} <= set(commands)
    missing, no_default = [], []
    for name, sub in [("kevlike", parser), *commands.items()]:
        formatter = sub._get_formatter()
        for a in sub._actions:
            if not a.option_strings or isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
                continue
            if not (a.help or "").strip():
                missing.append(f"{name} {a.option_strings[0]}")
            elif not isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction)) and not a.required \
                    and "default" not in formatter._get_help_string(a):
                no_default.append(f"{name} {a.option_strings[0]}")
    assert not missing, f"options without help: {missing}"
    assert not no_default, f"options whose help does not show the default: {no_default}"
    # the rendered help shows it too, e.g. serve --port
    assert "(default: 8000)" in " ".join(commands["serve"].format_help().split())


def test_engine_and_server_options_are_generated_from_their_settings():
    """Every setting of EngineOptions, ServerConfig and Limits that has a flag is one option of the commands that
    take it, with the setting's own default (the server's: ServerConfig's, whose engine keeps a state cache), help
    text and choices: the command line declares none of them itself."""
    from kevlike.cli import build_parser
    from kevlike.config.engine import EngineOptions
    from kevlike.config.fields import flag, leaves
    from kevlike.config.server import ServerConfig

    commands = _subparsers(build_parser())
    by_dest = {name: {a.dest: a for a in sub._actions if a.option_strings} for name, sub in commands.items()}
    library_only = {"max_questions", "min_options", "min_levels", "max_levels", "max_depth", "max_body_bytes",
                    "max_branch_context", "max_request_tokens", "state_cache_mb"}       # (the last two: serve's)
    for name, (f, default) in leaves(EngineOptions()).items():
        a = by_dest["decide"].get(name)
        if name in library_only:
            assert a is None, name
            continue
        assert a.option_strings == [flag(f)] and a.default == default, name
        assert a.help.startswith(f.metadata["help"][:40]) and a.choices in (None, list(f.metadata["choices"] or ()))
    decide_help = " ".join(commands["decide"].format_help().split())
    for name in ("dtype", "quantize", "script_policy"):       # each shows its default, taken from the dataclass
        assert f"(default: {getattr(EngineOptions(), name)})" in decide_help, name
    for name, (f, default) in leaves(ServerConfig()).items():
        a = by_dest["serve"].get(name)
        if name in library_only - {"max_request_tokens", "state_cache_mb"} or name == "profile":
            assert a is None, name
            continue
        assert a is not None and a.option_strings == [flag(f)], name
        if f.metadata["env"]:                                    # its variable, else the config's default
            assert a.default is None and f"${f.metadata['env']}, else {default:g}" in a.help
        else:
            assert a.default == default, name
    assert by_dest["serve"]["state_cache_mb"].default == 256.0 and EngineOptions().state_cache_mb == 0
    assert "(default: 8000)" in " ".join(commands["serve"].format_help().split())


def test_help_texts_name_no_unshipped_documents():
    from kevlike import cli

    parser = cli.build_parser()
    texts = [cli.__doc__, parser.format_help(), *(s.format_help() for s in _subparsers(parser).values())]
    for text in texts:
        for word in ("DESIGN", "§", "issue ", "PITFALLS"):
            assert word not in text, (word, text[:200])
    # the exit codes are documented in `kevlike --help` and `kevlike serve --help`
    assert "3  serve: cannot listen on" in parser.format_help()
    serve_help = _subparsers(parser)["serve"].format_help()
    assert "3  cannot listen on --host:--port" in serve_help and "kevlike: error: cannot listen on" in serve_help


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-cli") / "llama")


KEY = "Buchhaltung→Erstattung"


@pytest.mark.parametrize("encoding", ["cp1252", "ascii"])
def test_json_output_is_valid_whatever_the_terminal_encoding(tmp_path, tiny_model_dir, encoding):
    req = tmp_path / "r.json"
    req.write_text(json.dumps({"state": "Rückerstattung → Buchhaltung, bitte.", "questions": {
        "team": {"type": "choice", "instructions": "Wohin?", "criteria": {KEY: None, "Vertrieb": "Verkäufe"}},
        "ton": {"type": "score", "instructions": "Ton?", "criteria": ["ruhig", "verärgert"]}}},
        ensure_ascii=False), encoding="utf-8")
    env = {**os.environ, "PYTHONIOENCODING": encoding, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "kevlike", "decide", str(req), "--model", tiny_model_dir, "--timing"],
                       capture_output=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    out = json.loads(p.stdout.decode(encoding))
    assert list(out["answers"]["team"]["probabilities"]) == [KEY, "Vertrieb"]
    assert out["answers"]["ton"]["legend"] == {"0": "ruhig", "1": "verärgert"}
    err = p.stderr.decode(encoding)
    assert "Traceback" not in err and err.startswith("[kevlike] libraries ") and ", load " in err
    # what produced the answer: precision, option mode and orders, readout, profile (Engine.describe)
    assert "option mode list, 1 option order, readout " in err and "profile none (the model's own temperatures)" in err
    assert ("float32 [" in err or "bfloat16 [" in err), err
    # an error line naming a file the terminal cannot spell does not crash either
    p = subprocess.run([sys.executable, "-m", "kevlike", "decide", str(tmp_path / f"{KEY}.json")],
                       capture_output=True, timeout=120, env=env)
    err = p.stderr.decode(encoding)
    assert p.returncode == 2 and err.startswith("kevlike: error: cannot read") and err.count("\n") == 1, err


def test_utf8_terminal_keeps_the_text_unescaped(tmp_path, capsys, tiny_model_dir):
    from kevlike import cli

    cli._print_json({"answers": {KEY: 1.0}}, indent=None)
    out = capsys.readouterr().out
    assert json.loads(out) == {"answers": {KEY: 1.0}}
    if (sys.stdout.encoding or "").lower().replace("-", "") == "utf8":
        assert KEY in out


def test_option_orders_limit_in_cli_and_engine(tmp_path, capsys):
    from kevlike import cli
    from kevlike.model.engine import MAX_OPTION_ORDERS

    assert MAX_OPTION_ORDERS == 24
    from kevlike.eval.probes import PROBES

    assert cli.PROBE_NAMES == PROBES            # `kevlike probes --help` lists them without importing torch
    req = tmp_path / "r.json"
    req.write_text(json.dumps({"state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}}))
    t0 = time.perf_counter()
    for argv in (["decide", str(req)], ["serve"], ["eval"], ["calibrate", str(tmp_path)]):
        for bad in ("1000", "25"):
            assert cli.main([*argv, "--option-orders", bad]) == 2, (argv, bad)
            err = capsys.readouterr().err
            assert err == "kevlike: error: --option-orders must be at most 24 (each order is one more branch per " \
                          f"choice question in the forward pass), got {bad}\n", err
        assert cli.main([*argv, "--option-orders", "-1"]) == 2
        assert capsys.readouterr().err == "kevlike: error: --option-orders must be >= 0, got -1\n"
    for argv in (["decide", str(req)], ["serve"]):
        for flag in ("--abstain-above", "--p-right-below"):
            assert cli.main([*argv, flag, "1.5"]) == 2, (argv, flag)
            assert capsys.readouterr().err == f"kevlike: error: {flag} must be a probability from 0 to 1, got 1.5\n"
    assert time.perf_counter() - t0 < 60  # rejected up front: no model is loaded, nothing is served


def test_decide_exits_at_once_with_all_its_output(tmp_path, capsys, tiny_model_dir):
    """The console script leaves a one-shot ``decide`` by ``os._exit`` (no teardown of the model): what it writes
    is flushed first, so the bytes match an in-process call, also when a pipe reader leaves early."""
    from kevlike import cli

    req = tmp_path / "many.json"
    req.write_text(json.dumps({"state": "The quick brown fox.", "questions": {
        "pick": {"type": "choice", "instructions": "Which one?", "criteria": {f"fox {i}": None for i in range(200)}},
        "ok": {"type": "noul", "instructions": "Is it quick?"}}}))
    assert cli.main(["decide", str(req), "--model", tiny_model_dir, "--threads", "1"]) == 0
    in_process = capsys.readouterr().out.encode()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "kevlike", "decide", str(req), "--model", tiny_model_dir, "--threads", "1"],
                       capture_output=True, timeout=600, env=env)
    assert p.returncode == 0 and p.stderr == b"", p.stderr.decode(errors="replace")
    assert len(in_process) > 8000 and p.stdout == in_process
    # a reader that leaves after 100 bytes: exit 0, no traceback
    sh = subprocess.run(f"{sys.executable} -m kevlike decide {req} --model {tiny_model_dir} --threads 1 | head -c 100",
                        shell=True, capture_output=True, timeout=600, env=env)
    assert len(sh.stdout) == 100 and b"Traceback" not in sh.stderr, sh.stderr.decode(errors="replace")
    # a failed request exits normally, with its code
    p = run("decide", "-", stdin=b"{not json")
    assert p.returncode == 2


def test_max_options_and_option_mode_on_decide(tmp_path, capsys, tiny_model_dir):
    from kevlike import cli

    req = tmp_path / "many.json"
    req.write_text(json.dumps({"state": "The quick brown fox.", "questions": {
        "pick": {"type": "choice", "instructions": "Which one?", "criteria": {f"fox {i}": None for i in range(1000)}}}}))
    assert cli.main(["decide", str(req), "--model", tiny_model_dir]) == 2        # Jev's 255 without the flag
    err = capsys.readouterr().err
    assert "choice has 1000 options; it needs 2 to 255" in err and err.count("\n") == 1
    assert cli.main(["decide", str(req), "--max-options", "1", "--model", tiny_model_dir]) == 2
    assert capsys.readouterr().err == "kevlike: error: --max-options must be from 2 to 100000, got 1\n"
    assert cli.main(["decide", str(req), "--max-options", "1000", "--option-mode", "set", "--compact",
                     "--model", tiny_model_dir]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["answers"]["pick"]["probabilities"]) == 1000
    assert abs(sum(out["answers"]["pick"]["probabilities"].values()) - 1) < 1e-4
    for cmd in (["decide", str(req)], ["serve"], ["eval"], ["calibrate", str(tmp_path)], ["bench"]):
        with pytest.raises(SystemExit):
            cli.main([*cmd, "--option-mode", "bag"])
        assert "invalid choice: 'bag'" in capsys.readouterr().err


def test_tool_subcommands_refuse_bad_options_in_one_line(capsys):
    """The probes, load-test and fuzz tools are ``kevlike`` subcommands: a bad option value is one line on
    stderr and exit code 2, before any model or server starts."""
    from kevlike.cli import main

    for argv, text in ((["probes", "--only", "nope"], "--only"), (["loadtest"], "exactly one of --url or --spawn"),
                       (["fuzz", "--n", "0"], "--n and --workers must be >= 1"),
                       (["eval", "--suite", "generalization", "--splits", "realistic,realist"], "unknown 'realist'"),
                       (["eval", "--suite", "heldout", "--splits", "realistic"], "--splits goes with"),
                       (["eval", "--suite", "generalization", "--splits", " , "], "no split named"),
                       (["eval", "--suite", "generalization", "--splits", "realistic_fresh", "--half", "test"],
                        "realistic_fresh is all in the validation half"),
                       (["eval", "--reuse", "runs/x", "--splits", "realistic"], "--splits and --half go with a new run")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("kevlike: error: ") and text in err and err.count("\n") == 1, err
    assert main(["fuzz", "--seed", "3", "--show", "17"]) == 0
    assert capsys.readouterr().out.startswith("request 17: category ")


MODEL_COMMANDS = ("decide", "serve", "bench", "train", "eval", "calibrate", "probes", "parity", "loadtest", "fuzz")
"""The commands that load a model (loadtest and fuzz: in the servers they start); recalibrate loads none (it
reads the model's directory and fits on recorded logits) and gpu-check fixes each step's precision itself."""


def test_every_command_that_loads_a_model_takes_threads_and_dtype(monkeypatch):
    from kevlike import cli

    commands = _subparsers(cli.build_parser())
    for name in MODEL_COMMANDS:
        flags = {s for a in commands[name]._actions for s in a.option_strings}
        assert {"--threads", "--dtype"} <= flags, name
    # --threads reaches every engine a command loads (and the servers it starts) as KEVLIKE_THREADS; loadtest's and
    # fuzz's --dtype reach their servers as KEVLIKE_DTYPE; an invalid count is refused by the parser (exit 2)
    monkeypatch.delenv("KEVLIKE_THREADS", raising=False)
    monkeypatch.delenv("KEVLIKE_DTYPE", raising=False)
    cli._hand_down(cli.build_parser().parse_args(["fuzz", "--threads", "3", "--dtype", "float32"]))
    assert os.environ["KEVLIKE_THREADS"] == "3" and os.environ["KEVLIKE_DTYPE"] == "float32"
    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args(["eval", "--threads", "0"])
    assert e.value.code == 2
    # train --dtype is the config's mixed_precision; with --resume (the saved config) it is refused
    assert cli.TRAIN_PRECISION == {"auto": "auto", "float32": "no", "bfloat16": "bf16"}


BAD_GOLD = 'gold.q: a noul answer is true or false, got "maybe"'


def _bad_labelled(tmp_path) -> Path:
    good = {"request": {"state": "s", "questions": {"q": {"type": "noul", "instructions": "x?"}}}, "gold": {"q": True}}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(good) + "\n" + json.dumps({**good, "gold": {"q": "maybe"}}) + "\n")
    return bad


@pytest.mark.parametrize("command", ["eval", "calibrate", "train", "train-validation"])
def test_a_bad_labelled_file_is_reported_in_under_a_second_before_any_model_loads(tmp_path, command):
    """eval --data, calibrate --data --profile and train (the config's data and validation.data) read the labelled
    file line by line before torch is imported: the error names the file and the line, exit code 2, in < 1 s."""
    bad = _bad_labelled(tmp_path)
    config = tmp_path / "mine.yaml"
    config.write_text(f"data:\n  - {{path: {bad}, weight: 1}}\n")
    argv = {"eval": ["eval", "--data", str(bad), "--model", "kevlike-default"],
            "calibrate": ["calibrate", "kevlike-default", "--data", str(bad), "--profile", "mine"],
            "train": ["train", str(config), "--dtype", "float32", "--threads", "1"],
            "train-validation": ["train", str(ROOT / "configs" / "default.yaml"), f"validation.data={bad}"]}[command]
    code = ("import sys, time; t = time.perf_counter(); from kevlike.cli import main; rc = main(sys.argv[1:]); "
            "print(rc, time.perf_counter() - t, 'torch' in sys.modules)")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - t0
    rc, seconds, torch_loaded = p.stdout.split()
    assert p.stderr == f"kevlike: error: {bad}:2: {BAD_GOLD}\n"
    assert rc == "2" and torch_loaded == "False"
    assert float(seconds) < 1.0, (command, seconds, wall)


@pytest.mark.parametrize("argv", [
    ["decide", "examples/review.json", "--model", "no-such-model"],
    ["eval", "--model", "no-such-model", "--suite", "heldout", "--n", "2"],
    ["serve", "--model", "kevlike-default", "--model", "no-such-model", "--port", "0"],
    ["bench", "--model", "no-such-model", "--quick"],
    ["calibrate", "no-such-model", "--data", "mine.jsonl", "--profile", "mine"],
    ["calibrate", "no-such-model"],
])
def test_an_unknown_model_is_reported_before_torch_loads(argv):
    """decide, eval, serve, bench and calibrate check a local model's name (kevlike.model.registry.model_name_error):
    the message resolve_model would raise after the libraries load, exit 2, with torch never imported."""
    from kevlike.model.registry import unknown_model_message

    code = "import sys; from kevlike.cli import main; rc = main(sys.argv[1:]); print(rc, 'torch' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.stdout.split() == ["2", "False"], p.stderr
    message = ("no-such-model is not a decision-model directory (no kevlike.json)" if argv == ["calibrate", "no-such-model"]
               else unknown_model_message("no-such-model"))      # calibrate without --profile: a directory
    assert p.stderr == f"kevlike: error: {message}\n"


def test_a_server_style_model_at_profile_on_the_command_line_points_to_profile():
    from kevlike.model.registry import model_name_error, unknown_model_message

    assert model_name_error("kevlike-default@ops") == (
        "unknown model 'kevlike-default@ops': MODEL@PROFILE names a calibration profile in a request to the server; "
        "on the command line give --model kevlike-default --profile ops (kevlike decide, kevlike eval --data)")
    assert "not a registered name" in unknown_model_message("no-such@ops")      # not a model before the @: as before


def test_model_name_check_agrees_with_resolve_model(tmp_path):
    """model_name_error accepts exactly the names resolve_model resolves (without fetching): registered names,
    embedded backbones, decision-model and HF directories, hub ids that are no local path."""
    from kevlike.model.backbones import ModelNotFoundError, resolve_model
    from kevlike.model.registry import model_name_error

    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    for name in (None, "kevlike-default", "smollm2-135m-instruct", str(tmp_path / "hf"), "owner/model"):
        assert model_name_error(name) is None, name
    for name in ("no-such-model", str(tmp_path / "empty"), str(tmp_path / "missing"), "./a/b", "a/b/c"):
        assert model_name_error(name) is not None, name
        with pytest.raises(ModelNotFoundError) as e:
            resolve_model(name, auto_fetch=False)
        assert str(e.value) == model_name_error(name)


def test_train_config_errors_come_before_any_model_loads(tmp_path, capsys):
    from kevlike import cli

    assert cli.main(["train", str(ROOT / "configs" / "default.yaml"), "optim.lr=nan"]) == 2
    assert capsys.readouterr().err.startswith("kevlike: error: optim.lr must be a finite number")
    assert cli.main(["train", str(ROOT / "configs" / "default.yaml"), f"data=[{{path: {tmp_path / 'no.jsonl'}}}]"]) == 2
    assert capsys.readouterr().err == f"kevlike: error: data[0].path: {tmp_path / 'no.jsonl'} does not exist\n"
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "state.pt").write_bytes(b"")
    assert cli.main(["train", "--resume", str(tmp_path), "--dtype", "float32"]) == 2
    assert capsys.readouterr().err == ("kevlike: error: --resume continues a run with its saved config, precision "
                                       "included; drop --dtype\n")


def test_a_usage_error_is_one_line_with_exit_code_2(capsys):
    """argparse printed its whole usage block before the error; every CLI error is one line."""
    from kevlike import cli

    with pytest.raises(SystemExit) as e:
        cli.main(["decide", "examples/review.json", "--threads", "0"])
    assert e.value.code == 2
    assert capsys.readouterr().err == ("kevlike decide: error: argument --threads: must be 'auto' or an integer from "
                                       "1 to 256, got '0' (`kevlike decide --help` lists the options)\n")
    with pytest.raises(SystemExit) as e:
        cli.main(["nosuch"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("kevlike: error: argument COMMAND: invalid choice: 'nosuch'") \
        and err.count("\n") == 1
    with pytest.raises(SystemExit) as e:
        cli.main(["decide", "examples/review.json", "--bogus"])
    assert e.value.code == 2 and capsys.readouterr().err == (
        "kevlike decide: error: unrecognized arguments: --bogus (`kevlike decide --help` lists the options)\n")


def test_export_on_a_full_disk_leaves_no_file_that_blocks_the_retry(tmp_path, capsys, monkeypatch):
    """`kevlike export` to a disk that fills mid-write left a partial --out, and the retry after freeing space was
    refused ('--out … exists'; break-test 2026-12-07): it writes a temporary file beside OUT and renames it
    (kevlike.runs.atomic_path), removing it on failure."""
    import errno

    from kevlike import cli
    from kevlike.data import tasks

    monkeypatch.setattr(tasks, "labelled_lines", lambda task, split, n, seed=0: [{"i": i} for i in range(n)])
    real, calls = json.dumps, []

    def filling(obj, **kw):
        calls.append(obj)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, **kw)

    out = tmp_path / "mine.jsonl"
    monkeypatch.setattr(cli.json, "dumps", filling)
    assert cli.main(["export", "spam", "--n", "5", "--out", str(out)]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []                     # neither mine.jsonl nor its temporary file
    monkeypatch.setattr(cli.json, "dumps", real)
    assert cli.main(["export", "spam", "--n", "5", "--out", str(out)]) == 0
    assert [json.loads(x) for x in out.read_text().splitlines()] == [{"i": i} for i in range(5)]
    assert list(tmp_path.iterdir()) == [out]


def test_a_write_that_fails_leaves_the_old_file_or_none_and_no_temporary_file(tmp_path, monkeypatch):
    """kevlike.runs.atomic_path, under every run file (eval's metrics.json / records.jsonl / report.md, profiles,
    checkpoints, resumed splits, streams, exports): a disk that fills mid-write left a truncated metrics.json that
    `kevlike compare` then read as broken JSON (break-test 2026-12-07). Now a failure keeps the file as it was (or
    absent) and removes the temporary file; eval writes records.jsonl before metrics.json, so a metrics.json is
    only there with its records."""
    import errno

    from kevlike.eval import heldout
    from kevlike.runs import atomic_path, write_text_atomic

    old = tmp_path / "metrics.json"
    write_text_atomic(old, '{"v": 1}')
    with pytest.raises(OSError, match="No space"):
        with atomic_path(old) as tmp, open(tmp, "w") as f:
            f.write('{"v": 2, "trunc')
            raise OSError(errno.ENOSPC, "No space left on device")
    assert old.read_text() == '{"v": 1}' and list(tmp_path.iterdir()) == [old]
    write_text_atomic(old, '{"v": 3}')
    assert json.loads(old.read_text()) == {"v": 3} and list(tmp_path.iterdir()) == [old]

    run = tmp_path / "run"
    run.mkdir()
    real = json.dumps

    def filling(obj, **kw):
        if isinstance(obj, dict) and obj.get("question") == "q2":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, **kw)

    monkeypatch.setattr(heldout.json, "dumps", filling)
    recs = [{"question": f"q{i}", "split": "s", "type": "noul", "probs": [0.5, 0.5], "gold": 0} for i in range(3)]
    with pytest.raises(OSError, match="No space"):
        heldout._write_run(run, {"suite": "x"}, {}, recs, "t", "i", quiet=True)
    assert list(run.iterdir()) == []                 # no records.jsonl, no metrics.json, no temporary file


def test_ctrl_c_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch):
    """Ctrl-C printed ~90 lines of traceback from wherever it landed (break-test 2026-12-07); now one line, exit
    130 (the module docstring's table)."""
    from kevlike import cli

    def stopped(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_cmd_eval", stopped)
    assert cli.main(["eval", "--out", str(tmp_path / "runs")]) == 130
    assert capsys.readouterr().err == "kevlike eval: interrupted\n"


def test_sigterm_mid_write_leaves_no_temporary_file_and_exits_143(tmp_path, capsys, monkeypatch):
    """`kill` (SIGTERM) of `kevlike eval` mid-write left a hidden `.metrics.json.PID.tmp` (the default action kills
    where the process stands; only exceptions ran atomic_path's cleanup): now it unwinds like Ctrl-C, one line,
    exit 128 + 15, and the handler before the call is back after it."""
    import signal
    import time

    from kevlike import cli
    from kevlike.runs import atomic_path

    def writing(args):
        with atomic_path(tmp_path / "metrics.json") as tmp:
            tmp.write_text("{")
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)                      # the handler raises at the next bytecode, long before this ends
            tmp.write_text("{}")

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(cli, "_cmd_eval", writing)
    t0 = time.perf_counter()
    assert cli.main(["eval", "--out", str(tmp_path / "runs")]) == 143
    assert time.perf_counter() - t0 < 20
    assert capsys.readouterr().err == "kevlike eval: stopped by SIGTERM\n"
    assert list(tmp_path.iterdir()) == []       # neither metrics.json nor its temporary file
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_sigterm_whose_exception_is_lost_still_stops_the_command():
    """Break-test 2026-12-07: a SIGTERM that landed where Python only reports an exception ("Exception ignored in
    …") was lost and `kevlike eval` ran on. The handler's fallback sends the signal again with its default action
    once the grace period passes without main() having caught it. Here the command swallows the exception."""
    import signal
    import subprocess
    import sys

    script = (
        "import os, signal, time\n"
        "import kevlike.cli as cli\n"
        "cli.TERMINATION_GRACE_S = 1.0\n"
        "def swallowing(args):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(5)\n"
        "    except BaseException:\n"
        "        pass\n"
        "    time.sleep(60)\n"
        "    return 0\n"
        "cli._cmd_models = swallowing\n"
        "raise SystemExit(cli.main(['models']))\n")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50)
    assert p.returncode == -signal.SIGTERM, (p.returncode, p.stderr[-2000:])
    assert time.perf_counter() - t0 < 40


def test_a_reading_that_would_be_ignored_is_refused(tmp_path, capsys):
    """Break-test 2026-12-07: `eval --reuse RUN --option-orders 5` and `calibrate --data F --profile P --option-orders
    2` were accepted: the first re-scores logits read as the run read them, the second stores temperatures only, so
    the orders asked for were used nowhere (or fitted for and then served at the model's own)."""
    from kevlike import cli

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}},
                                "gold": {"q": "true"}}) + "\n")
    assert cli.main(["calibrate", str(tmp_path), "--data", str(data), "--profile", "p", "--option-mode", "set",
                     "--option-orders", "2"]) == 2
    assert capsys.readouterr().err == ("kevlike: error: --option-orders: a profile is fitted and served with its "
                                       "model's own option orders (its kevlike.json); calibrate without --profile "
                                       "stores new orders with the temperatures\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "records.jsonl").write_text("")
    (run / "metrics.json").write_text("{}")
    assert cli.main(["eval", "--reuse", str(run), "--option-orders", "2", "--option-mode", "set"]) == 2
    assert capsys.readouterr().err.startswith("kevlike: error: --option-orders and --option-mode: --reuse re-scores "
                                              "the earlier run's logits, read as that run read them")


def test_a_full_disk_says_where_it_was_writing(tmp_path, capsys, monkeypatch):
    """ENOSPC names no file: `kevlike eval --out FULL` printed '[Errno 28] No space left on device' alone
    (break-test 2026-12-05)."""
    import errno

    from kevlike import cli

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "_cmd_eval", full)
    assert cli.main(["eval", "--out", str(tmp_path / "runs")]) == 1       # the machine's failure: set-up, not input
    assert capsys.readouterr().err == (f"kevlike: error: [Errno 28] No space left on device (writing under --out "
                                       f"{tmp_path / 'runs'})\n")

    def missing(args):                                 # a file the user named: bad input, as before
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "mine.jsonl")

    monkeypatch.setattr(cli, "_cmd_eval", missing)
    assert cli.main(["eval", "--out", str(tmp_path / "runs")]) == 2
