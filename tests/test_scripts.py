"""Script detection of the state (outside the model) and the annotate / refuse policies."""

import json
import subprocess
import sys

import pytest

from kevlike.request.schema import RequestError
from kevlike.request.writing_systems import detect_script

from tiny import make_engine


@pytest.mark.parametrize("text,script", [
    ("The customer was charged twice.", "Latin"),
    ("Le client a été débité deux fois.", "Latin"),
    ("Ｆｕｌｌｗｉｄｔｈ letters", "Latin"),
    ("Клиенту дважды выставили счёт.", "Cyrillic"),
    ("Ο πελάτης χρεώθηκε δύο φορές.", "Greek"),
    ("تم خصم المبلغ مرتين", "Arabic"),
    ("הלקוח חויב פעמיים", "Hebrew"),
    ("顾客被收了两次费用", "Han"),
    ("고객에게 두 번 청구되었습니다", "Hangul"),
    ("ग्राहक से दो बार शुल्क लिया गया", "Devanagari"),
    ("ลูกค้าถูกเรียกเก็บเงินสองครั้ง", "Thai"),
    ("អតិថិជនត្រូវបានគិតប្រាក់ពីរដង", "Khmer"),
])
def test_dominant_script(text, script):
    r = detect_script(text)
    assert r.script == script and r.share > 0.9 and r.letters > 5


def test_shares_digits_and_symbols():
    assert detect_script("") .script is None
    assert detect_script("12345 !!! 😀").script is None and detect_script("12345").letters == 0
    r = detect_script("abcd ВГДЕЖЗ")  # 4 Latin, 6 Cyrillic letters; spaces ignored
    assert r.script == "Cyrillic" and r.share == pytest.approx(0.6) and r.counts == {"Latin": 4, "Cyrillic": 6}
    r = detect_script("x" * 100_000 + "я" * 100_000)  # long states are sampled, evenly
    assert r.counts["Latin"] == r.counts["Cyrillic"] == 10_000


RU = {"state": "Клиенту дважды выставили счёт за март.", "questions": {"q": {"type": "noul", "instructions": "Urgent?"}}}
EN = {"state": "The customer was charged twice in March.", "questions": {"q": {"type": "noul", "instructions": "Urgent?"}}}


def test_engine_annotates_and_refuses_by_policy():
    eng = make_engine("llama", "pointer", scripts=["Latin"])
    assert eng.decide(EN)["x_input"] == {"script": "Latin", "script_share": 1.0, "script_trained": True}
    assert eng.decide(RU)["x_input"] == {"script": "Cyrillic", "script_share": 1.0, "script_trained": False}
    strict = make_engine("llama", "pointer", scripts=["Latin"], script_policy="refuse")
    assert strict.decide(EN)["answers"] == eng.decide(EN)["answers"]
    with pytest.raises(RequestError) as e:
        strict.decide(RU)
    err = e.value.errors[0]
    assert e.value.status == 422 and err["loc"] == ["body", "state"] and err["type"] == "unsupported_script"
    assert "Cyrillic" in err["msg"] and "Latin" in err["msg"]
    # no declared scripts: nothing to judge, nothing refused
    assert make_engine("llama", "pointer", script_policy="refuse").decide(RU)["x_input"]["script_trained"] is None
    with pytest.raises(ValueError, match="^script_policy must be one of annotate, refuse, got 'block'$"):
        make_engine("llama", "pointer", script_policy="block")


@pytest.mark.backbone
def test_default_model_declares_latin_and_cli_refuses(tmp_path, default_engine):
    assert default_engine.scripts == frozenset({"Latin"})
    path = tmp_path / "ru.json"
    path.write_text(json.dumps(RU, ensure_ascii=False))
    p = subprocess.run([sys.executable, "-m", "kevlike", "decide", str(path), "--script-policy", "refuse"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "Cyrillic" in p.stderr and "unsupported" not in p.stdout
