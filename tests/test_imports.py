"""Nothing is installed under the top-level names kernels / training / eval (PyPI has unrelated
distributions of those names): every module lives under kevlike/."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_transformers_and_kevlike_import_together():
    import transformers
    from transformers import AutoModelForCausalLM  # noqa: F401  (transformers probes a `kernels` package)

    import kevlike.eval
    import kevlike.model.kernels
    import kevlike.training

    assert kevlike.model.kernels.__name__ == "kevlike.model.kernels"
    assert Path(kevlike.model.kernels.__file__).parent == ROOT / "kevlike" / "model" / "kernels"
    assert transformers.__version__


def test_no_top_level_kernels_training_eval_from_us(tmp_path):
    """From a neutral directory, none of the three names resolves to our code: no installed distribution
    that provides them is ours, and none resolves into this checkout outside an installed site-packages
    (transformers >= 5.25 depends on PyPI's unrelated `kernels`, which a venv inside the checkout holds)."""
    code = ("import importlib.util, importlib.metadata as md, json; d = md.packages_distributions(); "
            "print(json.dumps({n: [str((importlib.util.find_spec(n) or type('x', (), {'origin': None})).origin), "
            "d.get(n, [])] for n in ('kernels', 'training', 'eval')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    import json

    for name, (origin, dists) in json.loads(out).items():
        assert "kevlike" not in [d.lower() for d in dists], f"`import {name}` is provided by our distribution"
        if "site-packages" not in Path(origin).parts:
            assert str(ROOT) not in origin, f"`import {name}` resolves to our {origin}"
