"""Text of the state and of each question branch (DESIGN.md §4 "Rendering decisions", §5, §7).

Two renderings exist:

* the *pointer* template, read by the trained pointer head, whose structure is carried by
  reserved delimiter ids inserted by :mod:`kevlike.encode` (never by text)::

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
"""

from __future__ import annotations

import json

from .schema import Option, Question, Text


def render_text(value: Text) -> str:
    """A string as-is; an object or array as canonical JSON (sorted keys, compact separators,
    ``ensure_ascii=False``: key order carries no meaning, so it must not change the tokens)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def option_text(option: Option) -> str:
    """``"{key}: {description}"``, or the key alone when the description is null."""
    if option.description is None:
        return option.key
    return f"{option.key}: {render_text(option.description)}"


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


def lm_answers(question: Question) -> list[str]:
    """The continuation scored for each option, in option order (leading space included)."""
    if question.type == "noul":
        return [" yes", " no"]
    return [f" {o.key}" for o in question.options]
