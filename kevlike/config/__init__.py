"""kevlike's settings, one owner each: frozen dataclasses that validate themselves.

Every setting a user can give (a flag, a request field, a YAML key) has here one default, one set of choices, one
check and its help text; the command line builds its options from these fields, and the engine, the server, the
suites and the trainer take these objects instead of loose values. The package imports no heavy library (no torch,
numpy, pydantic, transformers) and no other kevlike room, so ``kevlike --help`` and every input check run before
anything heavy loads; an import-linter contract in pyproject.toml keeps it so.
"""
