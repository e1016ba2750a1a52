r"""Writing-system (script) detection of the state, outside the model (docs/design/DESIGN.md §12).

A decision model only knows the scripts it was trained on; a state in another script gets answers
that look as confident as any other and mean little. :func:`detect_script` names the script of the
state's letters, without a model call, and the engine reports it in every response and, with the
``refuse`` policy, rejects requests whose state is written in a script the artifact was not trained
on (``scripts`` in its ``kevlike.json``).

Method: every letter (Unicode general category ``L*``) of the *normalised* state (the text the
model reads, :func:`kevlike.request.render.normalize_text`) is mapped to its Unicode ``Script`` property
(Unicode Standard Annex #24, read through the ``regex`` library's ``\p{Script=…}``): the scripts in
:data:`SCRIPTS` by name, any other script as ``Other``. Letters whose Script is ``Common`` or
``Inherited`` — e.g. the mathematical styled letters U+1D400… ("𝐟𝐮𝐫𝐢𝐨𝐮𝐬"), were any left after
normalisation — are script-neutral and not counted, like digits, punctuation, spaces and symbols
(emoji). Counting is one
``Counter`` pass in C over the characters, then one cached lookup per *distinct* character: 0.01–0.4 ms
for a one-page state (``python -m kevlike.request.writing_systems`` measures it; an ASCII state takes
a fast path). States longer
than :data:`SAMPLE_CHARS` characters are read at evenly spaced windows of that many characters in all.
"""

from __future__ import annotations

import functools
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass

import regex

SCRIPTS = ("Latin", "Cyrillic", "Greek", "Arabic", "Hebrew", "Han", "Hiragana", "Katakana", "Hangul",
           "Devanagari", "Bengali", "Gurmukhi", "Gujarati", "Tamil", "Telugu", "Kannada", "Malayalam",
           "Sinhala", "Thai", "Lao", "Khmer", "Myanmar", "Tibetan", "Georgian", "Armenian", "Ethiopic",
           "Syriac", "Thaana", "Bopomofo", "Other")
SAMPLE_CHARS = 20_000
_SCRIPT_RE = {s: regex.compile(rf"\p{{Script={s}}}") for s in SCRIPTS if s != "Other"}
_NEUTRAL_RE = regex.compile(r"[\p{Script=Common}\p{Script=Inherited}]")


@functools.lru_cache(maxsize=1 << 16)
def _script_of(ch: str) -> str | None:
    """Unicode Script of one letter (``Other`` outside :data:`SCRIPTS`), or None for a non-letter or a
    Common/Inherited letter."""
    if not unicodedata.category(ch).startswith("L") or _NEUTRAL_RE.match(ch):
        return None
    for name, pattern in _SCRIPT_RE.items():
        if pattern.match(ch):
            return name
    return "Other"


@dataclass(frozen=True)
class ScriptReport:
    """``script``: the script of most of the state's letters (``None`` when it has no letter);
    ``share``: that script's fraction of the letters (0–1); ``letters``: letters counted;
    ``counts``: letters per script."""

    script: str | None
    share: float
    letters: int
    counts: dict

    def as_dict(self, trained: bool | None) -> dict:
        return {"script": self.script, "script_share": round(self.share, 4), "script_trained": trained}


def _sample(text: str) -> str:
    if len(text) <= SAMPLE_CHARS:
        return text
    n = 10
    step, width = len(text) // n, SAMPLE_CHARS // n
    return "".join(text[i * step:i * step + width] for i in range(n))


def detect_script(text: str) -> ScriptReport:
    """The dominant script of ``text``'s letters (see the module docstring for the method)."""
    text = _sample(text)
    if text.isascii():
        n = sum(1 for c in text if c.isalpha()) if len(text) < 64 else len(text) - len(
            text.translate(_ASCII_DROP_LETTERS))
        return ScriptReport("Latin" if n else None, 1.0 if n else 0.0, n, {"Latin": n} if n else {})
    counts: Counter = Counter()
    for ch, c in Counter(text).items():  # one C-level pass; then one lookup per distinct character
        script = _script_of(ch)
        if script is not None:
            counts[script] += c
    total = sum(counts.values())
    if not total:
        return ScriptReport(None, 0.0, 0, {})
    script, top = counts.most_common(1)[0]
    return ScriptReport(script, top / total, total, dict(counts))


_ASCII_DROP_LETTERS = {c: None for c in range(128) if chr(c).isalpha()}


def main() -> int:
    """``python -m kevlike.request.writing_systems``: detection time on one-page states in several scripts (µs)."""

    pages = {
        "English (ASCII)": "The customer was charged twice for the March invoice. " * 50,
        "French": "Le client a été débité deux fois pour la facture de mars. " * 50,
        "Russian": "Клиенту дважды выставили счёт за мартовскую оплату. " * 50,
        "Japanese": "顧客は3月の請求書で二重に請求されました。" * 100,
    }
    for name, text in pages.items():
        reps = 200
        t0 = time.perf_counter()
        for _ in range(reps):
            r = detect_script(text)
        us = (time.perf_counter() - t0) / reps * 1e6
        print(f"{name:18} {len(text):5d} chars  {r.script:9} share {r.share:.2f}  {us:8.1f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
