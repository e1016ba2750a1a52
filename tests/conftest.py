"""Fixtures: the real embedded backbone for tests marked ``backbone``."""

import pytest

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
