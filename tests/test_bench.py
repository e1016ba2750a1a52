"""`kevlike bench` on a tiny model: every mode runs, figures are consistent, and the prefix-cache
path through transformers' own KV cache gives the packed pass's logits."""

import json
import subprocess
import sys

import torch


from kevlike.eval.bench import bench_cell, markdown_table, synthetic_request

from tiny import make_engine, save_tiny_model


def test_bench_cell_on_tiny_model():
    eng = make_engine("llama", "pointer")
    enc = synthetic_request(eng, S=100, Q=3, K=5, texts=["The quick brown fox jumps over the lazy dog."])
    assert len(enc.state_ids) == 100 and enc.state_ids[0] == eng.encoder.state_id
    assert [len(b.options) for b in enc.branches] == [5, 5, 5]
    row = bench_cell(eng, enc, reps=2, batch=2)
    assert row["prefix_max_abs_dz"] <= 1e-4  # prefix-cache answers == packed answers
    L = sum(len(b.ids) for b in enc.branches)
    assert row["flop_ratio"] == (3 * 100 + L) / (100 + L)
    assert row["modes"]["separate"]["tokens"] == 3 * 100 + L and row["modes"]["packed"]["tokens"] == 100 + L
    for m in row["modes"].values():
        assert m["p50_ms"] > 0 and m["p95_ms"] >= m["p50_ms"] and m["peak_rss_mib"] > 0
        assert m["compiles"] == 0  # eager modes compile nothing
    table = markdown_table([row]).splitlines()
    assert table[2].startswith(f"| 100 | 3 | 5 | {100 + L:,} |") and len(table) == 3


def test_bench_compares_backends_and_skips_big_separate_runs():
    eng = make_engine("llama", "pointer")
    assert eng.backend == "kevlike_packed"
    sdpa = type(eng)(eng.model, eng.encoder.tokenizer, head=eng.head, backend="sdpa")
    enc = synthetic_request(eng, S=60, Q=2, K=3, texts=["The quick brown fox jumps over the lazy dog."])
    row = bench_cell(eng, enc, reps=1, batch=2, others={"sdpa": sdpa}, max_separate_tokens=100)
    assert "separate" not in row["modes"] and row["speedup_separate_over_packed"] is None
    assert row["sdpa_max_abs_dz"] <= 1e-5 and "packed-sdpa" in row["modes"]
    assert "—" in markdown_table([row])


def test_bench_cli_writes_json(tmp_path):
    model = save_tiny_model(tmp_path / "m")
    out = tmp_path / "b.json"
    p = subprocess.run([sys.executable, "-m", "kevlike", "bench", "--model", model, "--S", "64", "--Q", "2", "--K", "3",
                        "--reps", "1", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    res = json.loads(out.read_text())["results"]
    assert [(r["S"], r["Q"], r["K"]) for r in res] == [(64, 2, 3)]
    assert "separate/packed" in p.stdout


def test_bench_int8_row_uses_the_int8_roof(tmp_path):
    model = save_tiny_model(tmp_path / "m")
    out = tmp_path / "b.json"
    p = subprocess.run([sys.executable, "-m", "kevlike", "bench", "--model", model, "--S", "64", "--Q", "2", "--K", "3",
                        "--reps", "1", "--quantize", "int8", "--json", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert data["dtype"] == "int8" and "dynamic int8" in data["dtype_reason"]
    assert "int8 Linear 2048" in p.stdout and data["results"][0]["share_of_peak"] > 0


def test_packed_flops_hand_computed():
    """Tiny Llama: per layer q 64·64, k and v 64·32, o 64·64, gate/up/down 64·128 → 36,864 weights, 3 layers
    → 110,592. State of 3 tokens, one branch of 2: T = 5 tokens, pairs 3·4/2 + (2·3 + 2·3/2) = 15,
    d_attn = 4 heads · 16. FLOP = 2·110,592·5 + 4·3·64·15 = 1,117,440."""
    from kevlike.eval.bench import matmul_peak_gflops, packed_flops
    from kevlike.request.encode import EncodedBranch, EncodedRequest

    eng = make_engine("llama")
    enc = EncodedRequest((1, 2, 3), (EncodedBranch((4, 5), 1, (0,), question=0),), 1)
    assert packed_flops(eng.model, enc) == 1_117_440
    assert matmul_peak_gflops(torch.float32, "cpu", n=128, reps=2) > 0.1
    assert matmul_peak_gflops(torch.float32, "cpu", n=128, reps=2, int8=True) > 0.1
    from kevlike.model.quantize import quantize_int8

    q = make_engine("llama", "pointer")
    assert packed_flops(q.model, enc) == 1_117_440
    quantize_int8(q)                                   # int8 Linear layers count as the float ones they replace
    assert packed_flops(q.model, enc) == 1_117_440


def test_bench_cell_in_set_mode():
    eng = make_engine("llama", "pointer", option_mode="set")
    enc = synthetic_request(eng, S=60, Q=2, K=4, texts=["The quick brown fox jumps over the lazy dog."])
    assert [len(b.answers) for b in enc.branches] == [4, 4] and all(not b.options for b in enc.branches)
    row = bench_cell(eng, enc, reps=1, batch=2)
    T = sum(b.n_tokens for b in enc.branches)                   # prompts and option sub-branches
    assert row["K"] == 4 and row["modes"]["packed"]["tokens"] == 60 + T
    assert "prefix" not in row["modes"] and row["speedup_prefix_over_packed"] is None
    assert row["cached_max_abs_dz"] <= 1e-4                     # the state cache reads sub-branches too
    assert markdown_table([row]).splitlines()[2].endswith("| — |")


def test_bench_measures_the_models_own_option_mode_and_says_which(tmp_path):
    """Issue 32 item 7: `kevlike bench` always measured list mode, though the default model serves set mode."""
    from kevlike.model.modeldir import ModelDir, save_decision_model

    from tiny import make_engine

    tiny = make_engine("qwen2")
    backbone = tmp_path / "backbone"
    tiny.model.save_pretrained(backbone)
    tiny.encoder.tokenizer.save_pretrained(backbone)
    art = save_decision_model(tmp_path / "m", backbone=str(backbone), model=tiny.model, tokenizer=tiny.encoder.tokenizer,
                              head=tiny.head)
    m = ModelDir(art)
    m.write_manifest({**m.manifest(), "option_modes": ["list", "set"], "option_mode": "set"})

    def bench(model, *flags):
        out = tmp_path / "b.json"
        p = subprocess.run([sys.executable, "-m", "kevlike", "bench", "--model", str(model), "--S", "64", "--Q", "2",
                            "--K", "3", "--reps", "1", "--compare", "", "--json", str(out), *flags],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        data = json.loads(out.read_text())
        assert {r["option_mode"] for r in data["results"]} == {data["option_mode"]}
        return data["option_mode"], data["option_mode_source"], p.stdout.splitlines()[0]

    mode, source, head = bench(art)
    assert (mode, source) == ("set", "the model's own") and "option_mode=set (the model's own)" in head
    assert bench(art, "--option-mode", "list")[:2] == ("list", "--option-mode")
    assert bench(backbone)[:2] == ("list", "a backbone without a decision model: list")
