"""kevlike: typed questions about a text, answered with probabilities in one packed forward pass.

    >>> from kevlike import Engine
    >>> engine = Engine.from_pretrained()          # the embedded default, set up on first use
    >>> engine.decide({"state": "…", "questions": {"q": {"type": "noul", "instructions": "…"}}})
"""

from .backbones import DEFAULT_MODEL, ModelNotFoundError, SetupError
from .engine import Engine
from .schema import Limits, Request, RequestError, parse_request, validate_request

__version__ = "0.1.0"
__all__ = ["DEFAULT_MODEL", "Engine", "Limits", "ModelNotFoundError", "Request", "RequestError", "SetupError",
           "parse_request", "validate_request", "__version__"]
