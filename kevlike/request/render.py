"""Text of the state and of each question branch (DESIGN.md §4 "Rendering decisions", §5, §7).

Two renderings exist:

* the *pointer* template, read by the trained pointer head, whose structure is carried by
  reserved delimiter ids inserted by :mod:`kevlike.request.encode` (never by text)::

      <state> {state}
      <q> {instructions} <opt> {key}: {description} </opt> <opt> … </opt> <decide>

* the *LM readout* template, plain text with no reserved token, scored by the base model's own
  next-token log-probabilities (the training-free baseline)::

      Text:
      {state}

      Question: {instructions}
      Options:            (choice / score: one line per option)
      - {key}: {description}
      Answer: {answer}

No chat template is applied: the branch template is the prompt.

**Text normalisation.** Every piece of user text the model reads — state, instructions, option
keys and descriptions, in training and in serving, in both templates — passes through
:func:`normalize_text` here and nowhere else, so that text that *looks* the same gets the same
tokens and the same answers:

1. Unicode NFKC (compatibility composition, UAX #15): styled letters pasted from social media
   ("𝐟𝐮𝐫𝐢𝐨𝐮𝐬", U+1D400 block) become plain letters, full-width forms become ASCII, ligatures are split
   (ﬁ → fi), no-break spaces become spaces; "…" becomes "...", "½" becomes "1⁄2", "²" becomes "2".
2. Default-ignorable code points (the Unicode property ``Default_Ignorable_Code_Point``: zero-width
   space U+200B, word joiner U+2060, soft hyphen U+00AD, BOM U+FEFF, bidi controls, Hangul fillers,
   …) are removed — they render as nothing. Kept: ZWNJ U+200C and ZWJ U+200D (they change how
   Persian, Indic scripts and emoji sequences are drawn), variation selectors and tag characters
   (the flags of England, Scotland, Wales). Removal comes before NFKC, so an invisible character
   between a letter and its accent does not block their composition.

In an object or array state, every string — object keys too — is normalised before the keys are
sorted and the JSON is written (a full-width quote stays a quote *inside* a string, escaped).

Option *keys* are normalised only in the text the model reads: the response reports every key
exactly as the request sent it, byte for byte. Two keys that normalise to the same text (``"A"``
and ``"𝐀"``) read the same, but at different places in the option list, so their probabilities
differ as two identical options would.
"""

from __future__ import annotations

import json
import unicodedata

import regex

from kevlike.request.schema import Option, Question, Text

_INVISIBLE = regex.compile(r"[\p{Default_Ignorable_Code_Point}--[\u200c\u200d\ufe00-\ufe0f\U000e0100-\U000e01ef"
                           r"\U000e0020-\U000e007f]]", regex.V1)


def normalize_text(text: str) -> str:
    """``text`` in NFKC with default-ignorable code points removed (see the module docstring).
    ASCII text is returned unchanged (it is already normal)."""
    if text.isascii():
        return text
    # invisibles first: one between a letter and its combining accent would otherwise block composition
    return unicodedata.normalize("NFKC", _INVISIBLE.sub("", text))


def _normalize_json(value):
    """Every string of a JSON value (object keys too) normalised; an object whose keys would collide after
    normalisation keeps its keys as sent (no member is lost)."""
    if isinstance(value, str):
        return normalize_text(value)
    if isinstance(value, list):
        return [_normalize_json(v) for v in value]
    if isinstance(value, dict):
        keys = [normalize_text(k) if isinstance(k, str) else k for k in value]
        if len(set(keys)) < len(keys):
            keys = list(value)
        return {k: _normalize_json(v) for k, v in zip(keys, value.values())}
    return value


def render_text(value: Text) -> str:
    """A string normalised (:func:`normalize_text`); an object or array with every string (keys too)
    normalised first, then as canonical JSON (sorted keys, compact separators, ``ensure_ascii=False``:
    key order carries no meaning, so it must not change the tokens)."""
    if isinstance(value, str):
        return normalize_text(value)
    return json.dumps(_normalize_json(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def option_text(option: Option) -> str:
    """``"{key}: {description}"``, or the key alone when the description is null, normalised."""
    if option.description is None:
        return normalize_text(option.key)
    return f"{normalize_text(option.key)}: {render_text(option.description)}"


# --- LM readout (plain text) -------------------------------------------------------------

LM_STATE_PREFIX = "Text:\n"
LM_STATE_SUFFIX = "\n\n"


def lm_state(state: Text) -> str:
    return f"{LM_STATE_PREFIX}{render_text(state)}{LM_STATE_SUFFIX}"


def lm_prompt(question: Question) -> str:
    """Plain-text prompt of one question, ending just before the answer."""
    lines = [f"Question: {render_text(question.instructions)}"]
    if question.type == "noul":
        true_desc, false_desc = question.options[0].description, question.options[1].description
        if true_desc is not None:
            lines.append(f"Answer yes if: {render_text(true_desc)}")
        if false_desc is not None:
            lines.append(f"Answer no if: {render_text(false_desc)}")
        lines.append("Answer (yes or no):")
    elif question.type == "choice":
        lines.append("Options:")
        lines.extend(f"- {option_text(o)}" for o in question.options)
        lines.append("Answer:")
    else:  # score: levels are answered by their index
        lines.append(f"Levels (0 = lowest, {len(question.options) - 1} = highest):")
        lines.extend(f"{o.key}: {render_text(o.description)}" for o in question.options)
        lines.append("Answer (level number):")
    return "\n".join(lines)


LM_ABSTAIN_ANSWER = " cannot tell"
"""The continuation whose mean log-probability is the LM readout's none score (``x_abstain``, issue 33): read in
its own answer sub-branch after the question prompt, beside the options' answers, so the options' scores are those
of a model without it. An option whose answer text is the same words gets the same score (its ``x_abstain`` is then
at most one half before calibration)."""


def lm_answers(question: Question) -> list[str]:
    """The continuation scored for each option, in option order (leading space included)."""
    if question.type == "noul":
        return [" yes", " no"]
    return [f" {normalize_text(o.key)}" for o in question.options]
