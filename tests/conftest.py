"""Fixtures: the real embedded backbone for tests marked ``backbone``.

Inference in the suite runs at the float32 reference whatever the CPU: ``--dtype auto`` picks bfloat16 on
CPUs with bf16 units (AMX, AVX512-BF16), where packed == separate holds to bf16 rounding, not to the 1e-5
the parity tests assert. ``KEVLIKE_DTYPE`` (read by :func:`kevlike.model.backbones.resolve_dtype`) pins
``auto`` to float32 here and in the subprocesses the tests start; tests of the choice itself unset it.
Training's ``mixed_precision: auto`` does not read it: a training test that compares weights across runs
sets ``mixed_precision=no`` itself.

``KEVLIKE_MERGED_CACHE=off`` keeps the tests (and the commands they start) out of the user's merged-model cache
under ``$KEVLIKE_HOME/merged``: the tiny models the tests train would otherwise push the user's entries out
(it keeps four). ``tests/test_merged.py`` turns it on under a ``KEVLIKE_HOME`` of its own.
"""

import os

import pytest

os.environ["KEVLIKE_DTYPE"] = "float32"
os.environ["KEVLIKE_MERGED_CACHE"] = "off"

from kevlike import Engine


@pytest.fixture(scope="session")
def backbone_engine():
    """The real embedded backbone (fp32, LM readout); skipped unless `kevlike fetch` has run."""
    from kevlike.model.backbones import is_fetched

    if not is_fetched("smollm2-135m-instruct"):
        pytest.skip("embedded backbone not set up: run `kevlike fetch` (the README's first command does)")
    return Engine.from_pretrained("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def default_engine(backbone_engine):
    """The shipped default decision model (fp32, pointer head) on the embedded backbone."""
    return Engine.from_pretrained("kevlike-default")
