"""CPU choices: the thread count from the CPU time of other processes (kevlike/model/threads.py; the rule,
the /proc arithmetic on hand-made tick counts, fixed counts, the environment variable), --dtype auto by
the CPU flags, and opt-in int8 dynamic quantization."""

import pytest
import torch

from kevlike.model import threads as th


def test_threads_for_leaves_the_busy_cores_to_their_owners():
    assert th.threads_for(0.0, 2) == 2
    assert th.threads_for(0.4, 2) == 2
    assert th.threads_for(0.8, 2) == 1
    assert th.threads_for(3.0, 2) == 1            # never fewer than one
    assert th.threads_for(1.2, 8) == 7
    assert th.threads_for(-0.5, 4) == 4           # never more than the usable cores


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_auto_measures_the_others_busy_cores(monkeypatch, restore_threads):
    """Over 2 s the CPUs were busy 300 ticks and this process used 100 of them: the others kept
    (300 − 100) / 100 Hz / 2 s = 1.0 core busy, so 2 usable cores leave 1 thread."""
    clock = iter([10.0, 12.0, 12.5, 14.0])
    ticks = iter([(1000, 500), (1300, 600), (1350, 650), (1400, 900)])
    monkeypatch.setattr(th.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(th, "_ticks", lambda: next(ticks))
    monkeypatch.setattr(th, "usable_cores", lambda: 2)
    monkeypatch.setattr(th.os, "sysconf", lambda name: 100)
    policy = th.ThreadPolicy("auto")
    assert policy.apply() == 1 and torch.get_num_threads() == 1
    assert policy.busy_others == pytest.approx(1.0)
    assert policy.describe() == "1 thread (auto: 2 usable cores, other processes busy 1.0 cores)"
    assert policy.apply() == 1                     # 0.5 s later: no new measurement (clock 12.5 consumed)
    # 1.5 s after the last measurement: busy 50 ticks, own 250 -> others 0 -> both cores
    assert policy.apply() == 2 and policy.busy_others == 0.0


def test_fixed_counts_and_the_environment(monkeypatch, restore_threads):
    assert th.ThreadPolicy(1).apply() == 1 and torch.get_num_threads() == 1
    assert th.ThreadPolicy(3).describe() == "3 threads (fixed)"
    monkeypatch.setenv("KEVLIKE_THREADS", "3")
    assert th.ThreadPolicy.from_env(None).threads == 3
    assert th.ThreadPolicy.from_env(2).threads == 2                    # an explicit value wins
    monkeypatch.setenv("KEVLIKE_THREADS", "many")
    with pytest.raises(ValueError, match="KEVLIKE_THREADS must be 'auto' or an integer from 1 to 256, got 'many'"):
        th.ThreadPolicy.from_env(None)
    for bad in (0, -1, "2", True, 1.5):
        with pytest.raises(ValueError, match="threads must be"):
            th.ThreadPolicy(bad)


def test_real_proc_files_are_read_on_linux():
    ticks = th._ticks()
    if ticks is None:
        pytest.skip("no /proc here")
    busy, own = ticks
    assert busy >= own >= 0


def test_cli_threads_option():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "kevlike", "decide", "examples/review.json", "--threads", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--threads: must be 'auto' or an integer from 1 to 256, got '0'" in r.stderr


AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse4_2 avx2 fma\n"


def test_dtype_auto_follows_the_cpu_units(monkeypatch, capsys):
    from kevlike.model.backbones import resolve_dtype

    monkeypatch.delenv("KEVLIKE_DTYPE", raising=False)  # conftest pins the suite to float32
    assert resolve_dtype("auto", "cpu", AMX)[0] == "bfloat16"
    assert "amx_bf16, avx512_bf16" in resolve_dtype("auto", "cpu", AMX)[1]
    assert resolve_dtype("auto", "cpu", AVX2)[0] == "float32"
    assert resolve_dtype("auto", "cuda", AVX2) == ("bfloat16", "auto: CUDA device")
    assert resolve_dtype("float32", "cpu", AMX) == ("float32", "requested")
    with pytest.raises(ValueError, match="dtype must be one of auto, float32, bfloat16, got 'fp16'"):
        resolve_dtype("fp16")
    monkeypatch.setenv("KEVLIKE_DTYPE", "bfloat16")     # auto takes the variable, an explicit dtype wins
    assert resolve_dtype("auto", "cpu", AVX2) == ("bfloat16", "auto: KEVLIKE_DTYPE")
    assert resolve_dtype("float32", "cpu", AVX2) == ("float32", "requested")
    monkeypatch.setenv("KEVLIKE_DTYPE", "auto")
    assert resolve_dtype("auto", "cpu", AMX)[0] == "bfloat16"
    monkeypatch.setenv("KEVLIKE_DTYPE", "fp16")
    with pytest.raises(ValueError, match="KEVLIKE_DTYPE must be one of auto, float32, bfloat16, got 'fp16'"):
        resolve_dtype("auto")
    from kevlike import cli                          # every command refuses it before loading anything

    assert cli.main(["models"]) == 2
    assert "KEVLIKE_DTYPE must be one of auto, float32, bfloat16, got 'fp16'" in capsys.readouterr().err


def test_int8_quantization_replaces_the_decoder_linears_and_stays_close():
    """SmoothQuant smoothing + dynamic int8 (per-channel weights) on a tiny Llama: every Linear but down_proj
    and lm_head replaced, answers near fp32 (a random tiny model; the shipped model's accuracy cost is
    measured in docs/guide/benchmark.md, "int8")."""
    from tiny import REQUEST, make_engine

    from kevlike.model.quantize import quantize_int8

    eng = make_engine("llama", "pointer", state_cache_mb=64)
    ref = eng.decide(REQUEST)["answers"]
    eng.state_cache.discard(next(iter(eng.state_cache._entries)))
    assert quantize_int8(eng) == 3 * 6                               # q, k, v, o, gate, up per layer
    assert len(eng.state_cache) == 0          # the calibration pass left no float32 state behind
    still_float = {n.rsplit(".", 1)[-1] for n, m in eng.model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert still_float == {"down_proj", "lm_head"}
    got = eng.decide(REQUEST)["answers"]
    assert abs(got["urgent"]["noul"] - ref["urgent"]["noul"]) < 0.05
    for k, p in ref["team"]["probabilities"].items():
        assert abs(got["team"]["probabilities"][k] - p) < 0.05


def test_smoothing_leaves_the_float_model_unchanged():
    """SmoothQuant's rescaling (norm weight / s, Linear input columns · s) is exact up to float rounding: the
    answers of a tiny Llama and Qwen2 before and after smoothing every layer with large, uneven s agree to
    1e-5."""
    from tiny import REQUEST, make_engine, max_dp

    from kevlike.model.quantize import smooth

    for arch in ("llama", "qwen2"):
        eng = make_engine(arch, "pointer")
        ref = eng.decide(REQUEST)
        g = torch.Generator().manual_seed(0)
        for layer in eng.model.get_decoder().layers:
            d = layer.input_layernorm.weight.shape[0]
            s = smooth(layer.input_layernorm, [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj],
                       torch.rand(d, generator=g) * 50)
            assert s.max() / s.min() > 5
            smooth(layer.post_attention_layernorm, [layer.mlp.gate_proj, layer.mlp.up_proj],
                   torch.rand(d, generator=g) * 50)
        assert max_dp(eng.decide(REQUEST), ref) <= 1e-5


def test_int8_needs_the_cpu_and_float32():
    from kevlike import Engine

    with pytest.raises(ValueError, match="quantize must be one of none, auto, int8, got 'int4'"):
        Engine.from_pretrained("no-such-model", quantize="int4")
    with pytest.raises(ValueError, match="^quantize int8 quantizes float32 weights; drop dtype bfloat16"):
        Engine.from_pretrained("no-such-model", quantize="int8", dtype="bfloat16")     # EngineOptions refuses it


def test_quantize_auto_is_int8_exactly_where_the_weights_are_float32_on_the_cpu():
    from kevlike.model.quantize import resolve_quantize
    assert resolve_quantize("auto", "cpu", "float32")[0] == "int8"
    assert resolve_quantize("auto", "cpu", "bfloat16")[0] is None      # bf16 units: no int8
    assert resolve_quantize("auto", "cuda", "float32")[0] is None
    assert resolve_quantize("auto", "cuda", "bfloat16")[0] is None
    assert resolve_quantize("none", "cpu", "float32")[0] is None
    assert resolve_quantize(None, "cpu", "float32")[0] is None
    assert resolve_quantize("int8", "cpu", "float32")[0] == "int8"
    with pytest.raises(ValueError, match="runs on the CPU"):
        resolve_quantize("int8", "cuda", "float32")


def test_gpu_check_script_parses_and_refuses_without_cuda():
    """scripts/gpu_check.sh is prepared for a CUDA machine; here it must parse, and stop at once."""
    import subprocess

    assert subprocess.run(["bash", "-n", "scripts/gpu_check.sh"]).returncode == 0
    if torch.cuda.is_available():
        pytest.skip("CUDA present: run the script itself")
    r = subprocess.run(["bash", "scripts/gpu_check.sh"], capture_output=True, text=True, env={
        **__import__("os").environ, "OUT": "/tmp/kevlike-gpu-check-test"})
    assert r.returncode == 1 and "gpu-check needs a CUDA GPU" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("argv,env,message", [
    (["--threads", "99999"], {}, "--threads: must be 'auto' or an integer from 1 to 256"),
    ([], {"KEVLIKE_THREADS": "abc"}, "KEVLIKE_THREADS must be 'auto' or an integer from 1 to 256, got 'abc'"),
    (["--quantize", "int8", "--dtype", "bfloat16"], {}, "--quantize int8 quantizes float32 weights"),
])
def test_bad_cpu_settings_fail_before_any_model_loads(argv, env, message):
    import os
    import subprocess
    import sys
    import time

    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "kevlike", "decide", "examples/review.json", *argv],
                       capture_output=True, text=True, env={**os.environ, **env})
    assert r.returncode == 2 and message in r.stderr and r.stdout == ""
    assert time.perf_counter() - t0 < 8          # no model load (that takes 10+ s on this machine)


def test_server_settings_must_be_finite():
    from kevlike.config.server import ServerConfig
    from kevlike.model.state_cache import StateCache

    for bad in ({"timeout_s": float("inf")}, {"timeout_s": float("nan")}, {"max_wait_ms": float("inf")}):
        with pytest.raises(ValueError, match="finite"):
            ServerConfig(**bad)
    for bad in (float("inf"), float("nan"), -1):
        with pytest.raises(ValueError, match="finite number of MB"):
            StateCache(bad)
