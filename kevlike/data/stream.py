"""A recorded training stream: the draws of a :class:`~kevlike.data.tasks.TaskMixture`, its validation examples and
its trained scripts, written once to a file and read back where the data packages are not installed (a lent GPU
machine that reaches no registry; docs/guide/gpu.md).

The mixture is a pure function of ``(seed, i)`` (draw ``i`` is ``Random(f"{seed}:{i}")``'s), so a recorded stream
of draws ``0 … n-1`` is exactly what the live mixture would have drawn: a run trained from it takes the same
examples in the same order, and a checkpoint's ``{"seed", "drawn"}`` resumes either one.

File format (``kevlike-stream/1``): gzip-compressed JSON lines. Line 1 is the header ``{"format", "seed",
"tasks", "data", "n_train", "n_validation", "scripts", "config"}`` (``config``: the settings the draws depend on,
compared with the training config's when the file is read); then ``n_train`` training examples, then
``n_validation`` validation examples, one :class:`~kevlike.data.sources.Example` per line:
``{"request", "targets", "source", "gold", "twins", "cannot_tell"}``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from kevlike.data.sources import Example
from kevlike.runs import atomic_path

FORMAT = "kevlike-stream/1"


class StreamError(ValueError):
    """A stream file that is missing, malformed, exhausted, or recorded for another config."""


def example_to_json(ex: Example) -> dict:
    """One example as JSON-ready data (tuples become lists, ``cannot_tell`` a sorted list)."""
    return {"request": ex.request, "targets": ex.targets, "source": ex.source, "gold": ex.gold,
            "twins": [list(t) for t in ex.twins], "cannot_tell": sorted(ex.cannot_tell)}


def example_from_json(obj: dict) -> Example:
    """The inverse of :func:`example_to_json`: ``example_from_json(example_to_json(ex)) == ex``."""
    return Example(obj["request"], obj["targets"], obj["source"], obj["gold"],
                   [tuple(t) for t in obj["twins"]], frozenset(obj["cannot_tell"]))


def write_stream(path: str | Path, header: dict, train: list[Example], validation: list[Example]) -> Path:
    """Write a stream file (format above); ``header`` gives ``seed``, ``tasks``, ``data``, ``scripts`` and
    ``config``; the counts and the format are added. Written beside ``PATH`` and renamed
    (:func:`kevlike.runs.atomic_path`), so a reader never sees a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {"format": FORMAT, **header, "n_train": len(train), "n_validation": len(validation)}
    with atomic_path(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as f:
        f.write(json.dumps(head) + "\n")
        for ex in [*train, *validation]:
            f.write(json.dumps(example_to_json(ex)) + "\n")
    return path


def read_header(path: str | Path) -> dict:
    """The header line of a stream file.

    Raises:
        StreamError: no such file, not gzip JSON lines, or not ``kevlike-stream/1``."""
    path = Path(path)
    if not path.is_file():
        raise StreamError(f"stream: {path} does not exist")
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            head = json.loads(f.readline())
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise StreamError(f"stream: {path} is not a gzip JSON-lines stream file ({e})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise StreamError(f"stream: {path} is not a {FORMAT} file (header format "
                          f"{head.get('format') if isinstance(head, dict) else head!r})")
    return head


def check_header(head: dict, expected: dict, path: str | Path) -> None:
    """Raise :class:`StreamError` naming the first setting of ``expected`` (``seed``, ``tasks``, ``data``,
    ``config``) whose recorded value differs: the stream was drawn for another config."""
    for key, value in expected.items():
        if json.loads(json.dumps(value)) != head.get(key):
            raise StreamError(f"stream: {path} was recorded with another {key} than this config's "
                              f"(recorded {json.dumps(head.get(key))[:200]}); record it again with this config")


class RecordedMixture:
    """A :class:`~kevlike.data.tasks.TaskMixture` read from a stream file: ``take``, ``state_dict`` and
    ``load_state_dict`` behave as the live mixture's, and ``validation`` and ``scripts`` are the recorded
    validation examples and trained scripts.

    Args:
        path: the stream file (:func:`write_stream`).
        expected: settings the stream must have been recorded with (:func:`check_header`).

    Raises:
        StreamError: the file is missing or malformed, recorded for another config, or (from ``take``) exhausted.
    """

    def __init__(self, path: str | Path, expected: dict | None = None):
        self.path = Path(path)
        self.header = read_header(self.path)
        check_header(self.header, expected or {}, self.path)
        n_train, n_val = int(self.header["n_train"]), int(self.header["n_validation"])
        with gzip.open(self.path, "rt", encoding="utf-8") as f:
            f.readline()
            rows = [example_from_json(json.loads(line)) for line in f if line.strip()]
        if len(rows) != n_train + n_val:
            raise StreamError(f"stream: {self.path} holds {len(rows)} examples, its header says "
                              f"{n_train} + {n_val} (a truncated file?)")
        self.examples, self.validation = rows[:n_train], rows[n_train:]
        self.scripts = self.header.get("scripts")
        self.seed = int(self.header["seed"])
        self.drawn = 0

    def take(self, n: int) -> list[Example]:
        if self.drawn + n > len(self.examples):
            raise StreamError(f"stream: {self.path} holds {len(self.examples)} draws and the run asks for draw "
                              f"{self.drawn + n} (record max_steps x batch_size x grad_accum x processes draws)")
        out = self.examples[self.drawn:self.drawn + n]
        self.drawn += n
        return out

    def state_dict(self) -> dict:
        return {"seed": self.seed, "drawn": self.drawn}

    def load_state_dict(self, state: dict) -> None:
        if int(state["seed"]) != self.seed:
            raise StreamError(f"stream: {self.path} was drawn with seed {self.seed}, the checkpoint's with "
                              f"{state['seed']}")
        self.drawn = int(state["drawn"])
