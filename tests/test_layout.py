"""The layout's rules (docs/design/layout.md), checked by tools rather than by eye: import-linter's
contracts in pyproject.toml (layers, no cycles anywhere, a light config layer), and one owner per file of the
model directory."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.fail("lint-imports is missing: install the test extra (pip install -e '.[test]')")
    p = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "3 kept, 0 broken" in p.stdout
    assert "the config layer stays light" in p.stdout       # kevlike.config: no torch, numpy, pydantic, ...


def test_recipes_never_import_each_other():
    """training/ and eval/ import the library (kevlike.*), never each other (checked on the source,
    function-level imports included)."""
    for recipe, other in (("training", "eval"), ("eval", "training")):
        for f in (ROOT / "kevlike" / recipe).glob("*.py"):
            hits = re.findall(rf"^\s*(?:from|import) kevlike\.{other}\b.*$", f.read_text(), re.M)
            assert not hits, f"{f.relative_to(ROOT)} imports kevlike.{other}: {hits}"


MODEL_DIR_FILES = ["kevlike.json", "head.safetensors", "delimiters.safetensors", "calibration.json",
                   "adapter_config.json", "adapter_model.safetensors"]


def test_each_model_directory_file_is_named_in_one_module():
    """kevlike/model/modeldir.py owns the format: no other module of the library or the recipes spells a
    file name of a decision-model directory — except the manifest's, which kevlike/model/registry.py spells
    (and ModelDir takes from it), because the CLI checks a model name there before torch is imported."""
    from kevlike.model import registry
    from kevlike.model.modeldir import ModelDir

    owners = {}
    for f in (ROOT / "kevlike").rglob("*.py"):
        text = f.read_text()
        for name in MODEL_DIR_FILES:
            if re.search(rf"[\"'/]{re.escape(name)}[\"']", text):
                owners.setdefault(name, set()).add(str(f.relative_to(ROOT)))
    owner = {name: {"kevlike/model/modeldir.py"} for name in MODEL_DIR_FILES}
    owner["kevlike.json"] = {"kevlike/model/registry.py"}
    assert {n: o for n, o in owners.items() if o != owner[n]} == {}
    assert ModelDir.MANIFEST is registry.MANIFEST
