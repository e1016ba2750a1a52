"""``kevlike bench``: packed vs the real alternatives, same process, same run (DESIGN.md §1).

For each state length S, question count Q and option count K, one synthetic request (the
``examples/`` texts repeated to S tokens; Q choice questions of K options each, pointer template)
is answered by four modes:

1. ``packed``: one forward pass over ``[state][branch 1]…[branch Q]`` (ours, the engine's backend:
   the block-sparse ``kevlike_packed`` kernel on the CPU); ``packed-sdpa`` is the same pass through
   sdpa with the dense ``[L, L]`` mask (the reference, and the CPU path before the kernel), and with
   ``--flex`` ``packed-flex`` runs transformers' compiled FlexAttention with the ``BlockMask``;
2. ``separate``: one ``[state][branch]`` forward per question;
3. ``prefix``: the state encoded once into a transformers KV cache, a copy of it extended by each
   question's branch (the strongest naive alternative);
   ``cached-state``: the engine's state cache (:mod:`kevlike.model.state_cache`) on a hit — the state's
   keys/values already cached, only the branches run (what a second request about a state costs);
4. ``batched``: ``--batch`` copies of the request padded into one packed forward (per-request figures).

Reported per mode: ms per request (p50, p95 over ``--reps`` repetitions after a warm-up),
requests/s, tokens processed, peak resident memory during the mode (MiB, sampled every 5 ms),
torch.compile frames compiled during the mode (``compiles``: 0 for eager modes; for ``packed-flex``
the first cell compiles and later lengths must not recompile), and
``flop_ratio = (Q·S + Σ L_q) / (S + Σ L_q)`` — what the FLOP model predicts for separate/packed —
next to the measured ``speedup = separate / packed``. The readout is a pointer head with seeded
random weights: speed does not depend on trained values. ``prefix`` answers are checked against
``packed`` (max |Δz| printed). Results go to ``--json`` and, with matplotlib installed, ``--plot``.
"""

from __future__ import annotations

import copy
import json
import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import torch
from torch._dynamo.utils import counters

from kevlike.config.engine import DEFAULT_OPTIONS, EngineOptions
from kevlike.model.engine import Engine
from kevlike.model.heads import PointerHead
from kevlike.model.kernels import share_backends
from kevlike.model.state_cache import StateCache, cached_branch_logits
from kevlike.request.encode import EncodedRequest
from kevlike.request.schema import validate_request
from kevlike.runs import machine

QUICK = {"S": [256], "Q": [1, 2, 4], "K": [4]}  # with 2 repetitions: the "under two minutes" grid
FULL = {"S": [256, 1024, 4096], "Q": [1, 4, 16, 64], "K": [4, 16]}


class PeakRSS:
    """Peak resident set size of this process while the block runs (MiB), sampled every 5 ms."""

    def __enter__(self):

        self._proc = psutil.Process()
        self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak_mib = self.peak / 2**20


def synthetic_request(engine, S: int, Q: int, K: int, texts: list[str]) -> EncodedRequest:
    """Pointer-template request with exactly S state tokens (``<state>`` + S − 1 text tokens)."""
    questions = {f"q{q}": {"type": "choice", "instructions": f"Which category fits this text best? (aspect {q})",
                           "criteria": {f"option_{k}": f"the text is mainly about topic number {k}" for k in range(K)}}
                 for q in range(Q)}
    enc = engine.encoder.encode(validate_request({"state": "", "questions": questions}))
    ids = engine.encoder.text_ids([" ".join(texts)])[0]
    while len(ids) < S - 1:
        ids = ids + ids
    return replace(enc, state_ids=(enc.state_ids[0], *ids[:S - 1]))


def _time(fn, reps: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(1000 * (time.perf_counter() - t0))
    return out


@torch.inference_mode()
def prefix_cache_logits(engine, enc: EncodedRequest) -> list[torch.Tensor]:
    """The state through the stock model once (``use_cache=True``), then per question a deep copy of
    that cache extended by the branch; pointer logits per question ``[K_q]``."""
    dev = engine.device
    body = engine.model.get_decoder()
    S = len(enc.state_ids)
    state = torch.tensor([enc.state_ids], device=dev)
    cache = body(input_ids=state, use_cache=True).cache  # transformers 5: `cache` (was past_key_values)
    logits = []
    for b in enc.branches:
        ids = torch.tensor([b.ids], device=dev)
        pos = torch.arange(S, S + len(b.ids), device=dev)[None]
        h = body(input_ids=ids, cache=copy.deepcopy(cache), position_ids=pos, use_cache=True).last_hidden_state
        h_dec = h[:, [b.decide]]                                         # (1, 1, d) = (B, NB, d)
        h_opt = h[:, list(b.options)].unsqueeze(0)                       # (1, 1, K, d)
        mask = torch.ones((1, 1, len(b.options)), dtype=torch.bool, device=dev)
        logits.append(engine.head(h_dec, h_opt, mask)[0, 0].cpu())
    return logits


def compiled_frames() -> int:
    """torch.compile frames compiled so far in this process (dynamo's counter)."""

    return int(counters["frames"]["ok"])


@torch.inference_mode()
def matmul_peak_gflops(dtype: torch.dtype, device, n: int = 2048, reps: int = 5, int8: bool = False) -> float:
    """The machine's matmul rate in GFLOP/s for ``dtype``: ``torch.mm`` of two ``[n, n]`` matrices,
    ``2 n³`` FLOP, best of ``reps`` after a warm-up, at the current thread count — the roof the packed
    pass is compared with (its projections and MLPs are matmuls of this kind). ``int8``: the same product
    through torch's dynamically quantized int8 Linear (``quantize_dynamic``, what ``--quantize int8`` runs;
    activation quantization included), counted as ``2 n³`` operations."""
    if int8 and torch.device(device).type != "cpu":
        raise ValueError("the int8 roof is measured on the CPU (torch's dynamic int8 Linear has no CUDA kernel)")
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    if int8:
        lin = torch.nn.Linear(n, n, bias=False)
        lin.weight.data.copy_(b)
        q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)

        def mm(x, _):
            return q(x)
    else:
        mm = torch.mm
    mm(a, b)
    best = float("inf")
    for _ in range(reps):
        if a.is_cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        mm(a, b)
        if a.is_cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best / 1e9


def packed_flops(model, enc: EncodedRequest) -> float:
    """FLOP of one packed forward pass over ``enc`` (pointer template) up to the last hidden states: ``2 · P · T`` for the
    P weights of the decoder layers' Linear projections over T tokens, plus attention ``4 · layers ·
    d_attn · pairs`` (QKᵀ and AV) over the (query, key) pairs the branch mask lets attend: the state's
    causal triangle, and per branch of length L its L·S state pairs and its own triangle (in set mode,
    per option sub-branch of length A: A·(S + prompt) pairs and its own triangle). Norms, activations and
    the readout are left out (≪ 1 %)."""
    cfg = model.config
    layers = model.get_decoder().layers if hasattr(model, "get_decoder") else model.model.layers
    linear = (torch.nn.Linear, torch.ao.nn.quantized.dynamic.Linear)      # int8 (``--quantize``) counts the same
    weights = sum(m.in_features * m.out_features for layer in layers for m in layer.modules() if isinstance(m, linear))
    S = len(enc.state_ids)
    pairs, tokens = S * (S + 1) // 2, S
    for b in enc.branches:
        L = len(b.ids)
        pairs += L * S + L * (L + 1) // 2
        pairs += sum(len(a) * (S + L) + len(a) * (len(a) + 1) // 2 for a in b.answers)
        tokens += b.n_tokens
    d_attn = cfg.num_attention_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    return 2.0 * weights * tokens + 4.0 * len(layers) * d_attn * pairs


@torch.inference_mode()  # every mode without autograd (a grad-enabled forward keeps all activations)
def bench_cell(engine, enc: EncodedRequest, reps: int, batch: int, others: dict | None = None,
               max_separate_tokens: int | None = None) -> dict:
    """Time every mode on one request. ``others``: extra engines (same model, other attention
    backends) timed as ``packed-NAME``; their logits are checked against ``packed`` (max |Δz|).
    ``separate`` is left out (and the speed-up is None) when it would process more than
    ``max_separate_tokens`` tokens."""
    S = len(enc.state_ids)
    lens = [b.n_tokens for b in enc.branches]            # set mode: the question prompt and its option sub-branches
    Q = len(lens)
    set_mode = any(b.answers for b in enc.branches)
    singles = [enc.only_question(q) for q in range(Q)]
    others = others or {}
    modes = {
        "packed": (lambda: engine.question_logits([enc]), 1, S + sum(lens)),
        **{f"packed-{name}": ((lambda e=e: e.question_logits([enc])), 1, S + sum(lens)) for name, e in others.items()},
        "separate": (lambda: [engine.question_logits([s]) for s in singles], 1, Q * S + sum(lens)),
        "prefix": (lambda: prefix_cache_logits(engine, enc), 1, S + sum(lens)),
        "cached-state": (lambda: cached_branch_logits(engine, enc, state_cache)[0], 1, sum(lens)),
        f"batched x{batch}": (lambda: engine.question_logits([enc] * batch), batch, batch * (S + sum(lens))),
    }
    if max_separate_tokens is not None and Q * S + sum(lens) > max_separate_tokens:
        del modes["separate"]
    if set_mode:  # the prefix-cache peer reads each branch as one sequence: it has no set mode
        del modes["prefix"]
    row = {"S": S, "Q": Q, "K": len(enc.branches[0].options) or len(enc.branches[0].answers), "branch_tokens": sum(lens),
           "flop_ratio": (Q * S + sum(lens)) / (S + sum(lens)), "modes": {}}
    z_packed = engine.question_logits([enc])[0]
    z_prefix = None if set_mode else prefix_cache_logits(engine, enc)
    state_cache = StateCache(max_mb=1 << 20)
    z_cached, _ = cached_branch_logits(engine, enc, state_cache)      # the miss: fills the cache
    row["cached_max_abs_dz"] = max((a - b).abs().max().item() for a, b in zip(z_packed, z_cached))
    row["prefix_max_abs_dz"] = (None if set_mode else
                                max((a - b).abs().max().item() for a, b in zip(z_packed, z_prefix)))
    first_frames = {}
    for name, e in others.items():
        first_frames[f"packed-{name}"] = compiled_frames()  # the first call of a compiled backend compiles
        row[f"{name}_max_abs_dz"] = max((a - b).abs().max().item()
                                        for a, b in zip(z_packed, e.question_logits([enc])[0]))
    for name, (fn, per, tokens) in modes.items():
        frames = first_frames.get(name, compiled_frames())
        with PeakRSS() as mem:
            ms = _time(fn, reps)
        ms = [m / per for m in ms]
        row["modes"][name] = {"p50_ms": statistics.median(ms), "p95_ms": sorted(ms)[min(len(ms) - 1, int(0.95 * len(ms)))],
                              "requests_per_s": 1000 / statistics.mean(ms), "tokens": tokens / per,
                              "peak_rss_mib": mem.peak_mib, "compiles": compiled_frames() - frames}
    row["speedup_separate_over_packed"] = (row["modes"]["separate"]["p50_ms"] / row["modes"]["packed"]["p50_ms"]
                                           if "separate" in row["modes"] else None)
    row["speedup_prefix_over_packed"] = (row["modes"]["prefix"]["p50_ms"] / row["modes"]["packed"]["p50_ms"]
                                         if "prefix" in row["modes"] else None)
    row["speedup_packed_over_cached"] = row["modes"]["packed"]["p50_ms"] / row["modes"]["cached-state"]["p50_ms"]
    row["packed_gflop"] = packed_flops(engine.model, enc) / 1e9
    row["packed_gflops"] = row["packed_gflop"] / (row["modes"]["packed"]["p50_ms"] / 1000)
    return row


def markdown_table(results: list[dict]) -> str:
    """The table of docs/results/performance.md: p50 ms per request per mode, the measured speed-ups and the FLOP model."""
    modes = [m for m in ("packed", "packed-sdpa", "separate", "prefix") if any(m in r["modes"] for r in results)]
    head = ["S", "Q", "K", "packed tokens", *[f"{m} ms" for m in modes], "separate / packed", "FLOP model",
            "% of FLOP model", "prefix / packed"]
    if "packed-sdpa" in modes:
        head.append("packed-sdpa / packed")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        sp = r["speedup_separate_over_packed"]
        cells = [f"{r['S']:,}", str(r["Q"]), str(r["K"]), f"{r['modes']['packed']['tokens']:,.0f}"]
        cells += [f"{r['modes'][m]['p50_ms']:,.0f}" if m in r["modes"] else "—" for m in modes]
        cells += [f"{sp:.2f}×" if sp else "—", f"{r['flop_ratio']:.2f}×", f"{sp / r['flop_ratio']:.0%}" if sp else "—",
                  f"{r['speedup_prefix_over_packed']:.2f}×" if r["speedup_prefix_over_packed"] is not None else "—"]
        if "packed-sdpa" in modes:
            cells.append(f"{r['modes']['packed-sdpa']['p50_ms'] / r['modes']['packed']['p50_ms']:.2f}×")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: list[dict], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, S in enumerate(sorted({r["S"] for r in results})):
        rows = [r for r in results if r["S"] == S and r["K"] == results[0]["K"]]
        color = f"C{i}"
        done = [r for r in rows if r["speedup_separate_over_packed"] is not None]
        ax.plot([r["Q"] for r in done], [r["speedup_separate_over_packed"] for r in done], "o-", color=color,
                label=f"measured, S={S}")
        dense = [r for r in done if "packed-sdpa" in r["modes"]]
        if dense:
            ax.plot([r["Q"] for r in dense],
                    [r["modes"]["separate"]["p50_ms"] / r["modes"]["packed-sdpa"]["p50_ms"] for r in dense],
                    "x:", color=color, label=f"measured, dense-mask sdpa, S={S}")
        ax.plot([r["Q"] for r in rows], [r["flop_ratio"] for r in rows], "--", color=color, label=f"FLOP model, S={S}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("questions per request Q")
    ax.set_ylabel("separate / packed time")
    ax.set_title(f"packed vs separate (K={results[0]['K']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def run(model: str | None, options: EngineOptions = DEFAULT_OPTIONS, *, quick: bool = False, reps: int = 5,
        batch: int = 4, json_path: str | None = None, plot_path: str | None = None, S: list[int] | None = None,
        Q: list[int] | None = None, K: list[int] | None = None, compare: list[str] | None = None,
        max_separate_tokens: int | None = None) -> list[dict]:
    """The benchmark grid (``quick``: :data:`QUICK`, else :data:`FULL`; ``S``, ``Q``, ``K`` replace its axes), each
    mode timed ``reps`` times after one warm-up, ``batch`` requests per pass in the batched mode; results written
    to ``json_path`` and plotted to ``plot_path`` when given. ``compare``: extra attention backends timed as
    ``packed-NAME`` (default ``["sdpa"]`` when the engine's backend is ``kevlike_packed``). ``options``: how the
    model is loaded (:meth:`kevlike.model.engine.Engine.from_pretrained`; with int8 the roof is the int8 Linear's
    rate); ``options.option_mode``: how choice options are read (None: the model's own, its manifest's
    ``option_mode``, list for a bare backbone; the header line and the JSON say which and why), timed with a
    random pointer head whatever modes the model was trained for."""

    grid = dict(QUICK if quick else FULL)
    grid.update({k: v for k, v in (("S", S), ("Q", Q), ("K", K)) if v})
    option_mode = options.option_mode
    eng = Engine.from_pretrained(model, options, option_mode=None)
    torch.manual_seed(0)
    head = PointerHead(eng.model.config.hidden_size).to(eng.device).eval()
    label, reason = eng.dtype, eng.dtype_reason          # "int8" is a label of the loaded engine, not of its weights
    if option_mode is not None:
        mode, mode_source = option_mode, "--option-mode"
    elif eng.artifact_dir is not None:
        mode, mode_source = eng.option_mode, "the model's own"
    else:
        mode, mode_source = "list", "a backbone without a decision model: list"
    eng = type(eng)(eng.model, eng.encoder.tokenizer, name=eng.name, head=head, backend=eng.backend, option_mode=mode)
    eng.dtype, eng.dtype_reason = label, reason
    if compare is None:
        compare = ["sdpa"] if eng.backend == "kevlike_packed" else []
    if any(b != eng.backend for b in compare):
        share_backends(eng.model)   # the engines below share the model; on CUDA it is set to flex_attention
    others = {b.replace("flex_attention", "flex"): type(eng)(eng.model, eng.encoder.tokenizer, name=eng.name, head=head,
                                                             backend=b, option_mode=mode)
              for b in compare if b != eng.backend}
    texts = [json.loads(p.read_text())["state"] for p in sorted(Path("examples").glob("*.json"))
             if not p.name.endswith(".meta.json")] or ["The quick brown fox jumps over the lazy dog."]
    results = []
    threads = eng.thread_policy.apply(force=True) if eng.device.type == "cpu" else torch.get_num_threads()
    int8 = eng.dtype == "int8"
    peak = matmul_peak_gflops(torch.float32 if int8 else next(eng.model.parameters()).dtype, eng.device, int8=int8)
    print(f"model={eng.name} dtype={eng.dtype} ({eng.dtype_reason}) backend={eng.backend} option_mode={mode} "
          f"({mode_source}) threads={threads} reps={reps}")
    print(f"matmul peak ({eng.dtype}, {'int8 Linear' if int8 else 'torch.mm'} 2048³, {threads} threads): {peak:.0f} GFLOP/s")
    print(f"{'S':>5} {'Q':>3} {'K':>3} {'mode':>12} {'p50 ms':>9} {'p95 ms':>9} {'req/s':>7} {'tokens':>7} "
          f"{'peak MiB':>8} {'compiles':>8}")
    for s in grid["S"]:
        for k in grid["K"]:
            for q in grid["Q"]:
                row = bench_cell(eng, synthetic_request(eng, s, q, k, texts), reps, batch, others, max_separate_tokens)
                row["option_mode"] = mode
                results.append(row)
                for name, m in row["modes"].items():
                    print(f"{s:5d} {q:3d} {k:3d} {name:>12} {m['p50_ms']:9.1f} {m['p95_ms']:9.1f} "
                          f"{m['requests_per_s']:7.2f} {m['tokens']:7.0f} {m['peak_rss_mib']:8.0f} {m['compiles']:8d}")
                sp = row["speedup_separate_over_packed"]
                sep = (f"separate/packed {sp:.2f}x (FLOP model {row['flop_ratio']:.2f}x, {sp / row['flop_ratio']:.0%})"
                       if sp is not None else f"separate skipped (FLOP model {row['flop_ratio']:.2f}x)")
                extra = "".join(f"; {n} max|dz| {row[f'{n}_max_abs_dz']:.1e}" for n in others)
                row["share_of_peak"] = row["packed_gflops"] / peak
                print(f"{'':13} packed pass {row['packed_gflop']:.1f} GFLOP at {row['packed_gflops']:.0f} GFLOP/s = "
                      f"{row['share_of_peak']:.0%} of the matmul peak")
                print(f"{'':13} packed/cached-state {row['speedup_packed_over_cached']:.2f}x (state from the cache; "
                      f"max|dz| {row['cached_max_abs_dz']:.1e})")
                pre = ("prefix: no set mode" if row["speedup_prefix_over_packed"] is None else
                       f"prefix/packed {row['speedup_prefix_over_packed']:.2f}x; prefix max|dz| {row['prefix_max_abs_dz']:.1e}")
                print(f"{'':13} {sep}; {pre}{extra}", flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps({"model": eng.name, "dtype": eng.dtype, "dtype_reason": eng.dtype_reason, "threads": threads,
                                               "matmul_peak_gflops": peak,
                                               "backend": eng.backend, "compare": list(others), "reps": reps,
                                               "option_mode": mode, "option_mode_source": mode_source,
                                               "machine": machine(), "results": results}, indent=2))
    print()
    print(markdown_table(results))
    if plot_path and not plot(results, plot_path):
        print("plot skipped: matplotlib is not installed (pip install matplotlib)")
    return results
