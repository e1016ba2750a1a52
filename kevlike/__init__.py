"""kevlike: typed questions about a text, answered with probabilities in one packed forward pass.

    >>> from kevlike import Engine
    >>> engine = Engine.from_pretrained()          # the embedded default, set up on first use
    >>> engine.decide({"state": "…", "questions": {"q": {"type": "noul", "instructions": "…"}}})

Importing the package is cheap: its public names are imported on first access (PEP 562), so ``kevlike
--help`` starts without loading pydantic or torch, and request validation without loading torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"  # the same as pyproject.toml's [project] version
__all__ = ["DEFAULT_MODEL", "Engine", "Limits", "ModelNotFoundError", "Request", "RequestError", "SetupError",
           "parse_request", "validate_request", "__version__"]

# name -> submodule it is imported from on first access (model.* import torch, request.schema pydantic)
_LAZY = {"DEFAULT_MODEL": "model.backbones", "ModelNotFoundError": "model.backbones", "SetupError": "model.backbones",
         "Engine": "model.engine", "Limits": "config.limits", "Request": "request.schema",
         "RequestError": "request.schema", "parse_request": "request.schema", "validate_request": "request.schema"}


def __getattr__(name: str):
    """Import a public name on first use and cache it in the package namespace.

    Raises:
        AttributeError: ``name`` is not a public name of the package (nor an imported submodule).
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
