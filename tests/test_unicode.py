"""Text that looks the same gets the same answers: one normalisation (NFKC, default-ignorable code points
removed) of all user text before tokenizing, in training and serving; option keys still round-trip byte
for byte; writing-system detection follows Unicode's Script property."""

from __future__ import annotations

import pytest

from kevlike.request.encode import Encoder
from kevlike.request.render import normalize_text, render_text
from kevlike.request.schema import validate_request
from kevlike.request.writing_systems import detect_script

from tiny import make_engine, make_tokenizer

CLEAN = "The package arrived broken and the seller refused my refund. I am furious."
# U+200B zero-width space, U+2060 word joiner, U+00AD soft hyphen inside four words: renders identically
INVISIBLE = "The pack\u200bage arrived bro\u2060ken and the sel\u00adler refused my re\u00adfund. I am furious."


def bold(text: str) -> str:
    """``text`` in Unicode MATHEMATICAL BOLD letters and digits (U+1D400…), as pasted from social media."""
    out = []
    for c in text:
        if "A" <= c <= "Z":
            out.append(chr(0x1D400 + ord(c) - 65))
        elif "a" <= c <= "z":
            out.append(chr(0x1D41A + ord(c) - 97))
        elif "0" <= c <= "9":
            out.append(chr(0x1D7CE + ord(c) - 48))
        else:
            out.append(c)
    return "".join(out)


BOLD = bold(CLEAN)


def request(state, keys=("billing", "shipping", "refunds")):
    return {"state": state, "questions": {
        "angry": {"type": "noul", "instructions": "Is the customer angry?"},
        "team": {"type": "choice", "instructions": "Which team should handle this?",
                 "criteria": {k: None for k in keys}},
        "anger": {"type": "score", "instructions": "How angry?", "criteria": ["calm", "upset", "furious"]}}}


def test_normalize_text_cases():
    assert normalize_text(INVISIBLE) == CLEAN
    assert normalize_text(BOLD) == CLEAN and BOLD != CLEAN
    assert normalize_text("ＦＵＬＬ　ｗｉｄｔｈ") == "FULL width"
    assert normalize_text("of\ufb01ce\u00a0hours\ufeff") == "office hours"
    assert normalize_text("\u202eevil\u202c \u3164x") == "evil x"        # bidi override, Hangul filler
    # kept: ZWNJ (Persian), ZWJ (emoji sequences), variation selectors
    assert normalize_text("می\u200cخواهم 👩\u200d💻 ❤\ufe0f") == "می\u200cخواهم 👩\u200d💻 ❤\ufe0f"
    assert normalize_text("plain ASCII stays\tas is\n") == "plain ASCII stays\tas is\n"


def test_object_states_and_descriptions_are_normalised_too():
    assert render_text({"note": BOLD, "n": 1}) == render_text({"note": CLEAN, "n": 1})
    enc = Encoder(make_tokenizer())
    a = enc.encode(validate_request({"state": {"note": INVISIBLE}, "questions": {"q": {
        "type": "choice", "instructions": bold("Which team?"),
        "criteria": {"billing": "char\u200bges", "sales": None}}}}))
    b = enc.encode(validate_request({"state": {"note": CLEAN}, "questions": {"q": {
        "type": "choice", "instructions": "Which team?", "criteria": {"billing": "charges", "sales": None}}}}))
    assert a == b


@pytest.mark.parametrize("variant", [INVISIBLE, BOLD], ids=["invisible", "bold"])
def test_lookalike_states_get_identical_tokens_and_answers(variant):
    enc = Encoder(make_tokenizer())
    assert enc.encode(validate_request(request(variant))) == \
        enc.encode(validate_request(request(CLEAN)))
    eng = make_engine("llama", "pointer")
    a, b = eng.decide(request(variant))["answers"], eng.decide(request(CLEAN))["answers"]
    assert a["angry"]["noul"] == pytest.approx(b["angry"]["noul"], abs=1e-6)
    for k in ("billing", "shipping", "refunds"):
        assert a["team"]["probabilities"][k] == pytest.approx(b["team"]["probabilities"][k], abs=1e-6)


def test_option_keys_round_trip_byte_for_byte():
    keys = ("Buchhaltung→Erstattung", bold("Billing"), "ship\u200bping")
    out = make_engine("llama", "pointer").decide(request(CLEAN, keys))
    assert list(out["answers"]["team"]["probabilities"]) == list(keys)
    assert out["answers"]["team"]["choice"] in keys


def test_styled_letters_are_not_a_foreign_script():
    """Script detection reads the Unicode Script property of the normalised text: bold letters are Latin
    after NFKC (and Common before it: never a foreign script)."""
    assert detect_script(render_text(BOLD)).script == "Latin"
    assert detect_script(BOLD).script is None                      # Script=Common: script-neutral
    assert detect_script("Клиенту дважды").script == "Cyrillic"
    assert detect_script("ᏣᎳᎩ").script == "Other"                   # Cherokee: a script outside SCRIPTS
    eng = make_engine("llama", "pointer", script_policy="refuse")
    eng.scripts = frozenset({"Latin"})
    out = eng.decide(request(BOLD))
    assert out["x_input"] == {"script": "Latin", "script_share": 1.0, "script_trained": True}


@pytest.mark.backbone
def test_issue_cases_on_the_default_model(default_engine):
    """The reported cases on the shipped model: within 1e-3 (here: the same tokens, so equal)."""
    ref = default_engine.decide(request(CLEAN))["answers"]
    for variant in (INVISIBLE, BOLD):
        got = default_engine.decide(request(variant))["answers"]
        assert got["angry"]["noul"] == pytest.approx(ref["angry"]["noul"], abs=1e-3)
        for k, p in ref["team"]["probabilities"].items():
            assert got["team"]["probabilities"][k] == pytest.approx(p, abs=1e-3)


def test_invisibles_go_before_composition_and_objects_are_normalised_per_string():
    """Found by trying to break it: an invisible between a letter and its accent blocked NFKC's
    composition; object keys were sorted before normalisation; a full-width quote became a raw quote
    inside the JSON text."""
    assert normalize_text("cafe\u200b\u0301") == normalize_text("caf\u00e9") == "caf\u00e9"
    assert normalize_text("\u1100\u200b\u1161") == normalize_text("\u1100\u1161")
    assert render_text({bold("body"): 1, "customer": 2}) == render_text({"body": 1, "customer": 2}) \
        == '{"body":1,"customer":2}'
    assert render_text({"x": "＂hi＂"}) == render_text({"x": '"hi"'}) == '{"x":"\\"hi\\""}'
    assert render_text({"A": 1, bold("A"): 2}) == '{"A":1,"' + bold("A") + '":2}'    # collision: keys kept
    flag = "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"           # England: tags kept
    assert normalize_text(flag) == flag
