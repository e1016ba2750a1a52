"""Which int8 library path is fast on this CPU (issue 14: "torch's dynamic quantization or torchao —
measure which")? Times one MLP block of the default backbone's shape (576 → 1536 → 576, no bias) on a
``[1, T, 576]`` activation, in float32, with torch's dynamic quantization (``quantize_dynamic``, fbgemm
int8 GEMMs: what ``--quantize int8`` uses) and with torchao's ``Int8DynamicActivationInt8WeightConfig``
(eager, and under ``torch.compile`` if it compiles). Prints one JSON line per path: median milliseconds
of ``--reps`` calls after a warm-up, the speed-up over float32 and the largest absolute output error.

    pip install --no-deps torchao==0.18.0     # optional; the torchao rows are skipped without it
    python experiments/int8_backends.py --tokens 700 --threads 1
"""

from __future__ import annotations

import argparse
import copy
import json
import time
import warnings

import torch

from kevlike.runs import machine


def median_ms(fn, x: torch.Tensor, reps: int) -> float:
    with torch.inference_mode():
        fn(x)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=700, help="T, tokens in the activation")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(576, 1536, bias=False), torch.nn.Linear(1536, 576, bias=False)).eval()
    x = torch.randn(1, args.tokens, 576)
    paths = {"float32": mlp,
             "torch quantize_dynamic int8": torch.ao.quantization.quantize_dynamic(
                 copy.deepcopy(mlp), {torch.nn.Linear}, dtype=torch.qint8)}
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
        tao = copy.deepcopy(mlp)
        quantize_(tao, Int8DynamicActivationInt8WeightConfig())
        paths["torchao int8 dynamic (eager)"] = tao
        try:
            compiled = torch.compile(tao)
            with torch.inference_mode():
                compiled(x)
            paths["torchao int8 dynamic (torch.compile)"] = compiled
        except Exception as e:                      # no C++ toolchain, unsupported op…: say so, keep going
            print(json.dumps({"path": "torchao int8 dynamic (torch.compile)", "error": f"{type(e).__name__}: {e}"[:300]}))
    except ImportError:
        print(json.dumps({"path": "torchao", "error": "not installed (pip install --no-deps torchao)"}))
    with torch.inference_mode():
        ref = mlp(x)
        base = None
        for name, fn in paths.items():
            ms = median_ms(fn, x, args.reps)
            base = base or ms
            print(json.dumps({"path": name, "ms": round(ms, 2), "speedup": round(base / ms, 3),
                              "max_abs_err": float((fn(x) - ref).abs().max()), "tokens": args.tokens,
                              "threads": args.threads, "cpu": machine()["cpu"],
                              "torch": torch.__version__}))


if __name__ == "__main__":
    main()
