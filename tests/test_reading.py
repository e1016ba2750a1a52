"""Issue 31's reading sources (kevlike/data/reading.py, kevlike/data/snli.py): golds read back from the generated
text, opposite pairs tied as twins, held-out properties never trained, SNLI labels mapped as documented."""

import hashlib
import io
import json
import random
import re
import tarfile

import pytest

from kevlike.data import reading, snli
from kevlike.data.families import SOURCES, SYNTHETIC_SOURCES, family_example
from kevlike.data.sources import DataUnavailableError
from kevlike.eval.generalization import seen_sources

WORDS = {w: i for i, w in enumerate(reading.NUM_WORDS)}


def _valid(req: dict, gold: dict, twins: list) -> None:
    assert set(req["questions"]) == set(gold)
    for qid, q in req["questions"].items():
        g = gold[qid]
        if q["type"] == "noul":
            assert g in ("true", "false")
        elif q["type"] == "choice":
            assert g in q["criteria"] and len(q["criteria"]) >= 2
        else:
            assert 0 <= int(g) < len(q["criteria"])
    for a, b, keymap in twins:
        assert keymap == {"true": "false", "false": "true"}
        assert {gold[a], gold[b]} == {"true", "false"}, (req["questions"][a], req["questions"][b])


def test_documents_are_seeded_valid_and_four_to_eight_questions():
    rows = reading.rows("documents", "validation")
    assert len(rows) == reading.SPLIT_SIZES["validation"]
    again = [reading.document(random.Random(f"documents:{reading.SPLIT_SEEDS['validation']}"))]
    assert again[0] == rows[0]                       # a pure function of the split's seed
    n_twins = 0
    for req, gold, twins in rows:
        _valid(req, gold, twins)
        assert 4 <= len(req["questions"]) <= 8
        n_twins += len(twins)
    assert n_twins >= 0.6 * len(rows)                # most documents carry an opposite pair


def _stars(state: str) -> int:
    """The rating a review states, read back with patterns of its own (not the generator's)."""
    m = re.search(r"\b(\d|[A-Za-z]+) stars? out of (?:five|5)|\b(\d)/5|\b(\d) (?:out )?of 5", state)
    tok = next(g for g in m.groups() if g)
    return int(tok) if tok.isdigit() else WORDS[tok.lower()]


def test_star_rating_gold_is_the_rating_in_the_text_either_scale_direction():
    checked = 0
    for req, gold, _ in reading.rows("documents", "test"):
        for qid, q in req["questions"].items():
            if q["type"] == "score" and q["instructions"] == "How many stars did the reviewer give?" \
                    or q["instructions"] == "What is the star rating?":
                r = _stars(req["state"])
                assert q["criteria"][int(gold[qid])] == f"{r} star" + ("s" if r > 1 else "")
                checked += 1
            m = re.fullmatch(r"Did the reviewer give (\d) or more stars\?", q["instructions"])
            if m:
                assert gold[qid] == str(_stars(req["state"]) >= int(m.group(1))).lower()
                checked += 1
    assert checked > 20


def test_incident_duration_bin_follows_the_clock_times():
    checked = 0
    for req, gold, _ in reading.rows("documents", "test"):
        m = re.search(r"began at (\d\d):(\d\d) UTC and service was fully restored at (\d\d):(\d\d)", req["state"])
        if not m:
            continue
        a, b = int(m.group(1)) * 60 + int(m.group(2)), int(m.group(3)) * 60 + int(m.group(4))
        d = b - a
        want = "under 15 minutes" if d < 15 else "15 to 60 minutes" if d <= 60 else "1 to 6 hours" if d <= 360 \
            else "more than 6 hours"
        for qid, q in req["questions"].items():
            if q["instructions"] == "How long did the outage last?":
                assert q["criteria"][int(gold[qid])] == want
                checked += 1
    assert checked >= 5


def test_version_compare_gold():
    for req, gold, _ in reading.rows("documents", "test"):
        m = re.search(r"version (\d+\.\d+\.\d+): fixes .*running version (\d+\.\d+\.\d+)", req["state"], re.S)
        if not m:
            continue
        fix, mine = (tuple(map(int, v.split("."))) for v in m.groups())
        for qid, q in req["questions"].items():
            if q["instructions"].startswith("Does the user need to update"):
                assert gold[qid] == str(mine < fix).lower()


def test_absurd_no_answers_are_absent_and_test_uses_only_heldout_properties():
    held = {x for pool_ in (reading.LANGUAGES, reading.FORMS, reading.TOPICS, reading.ENTITIES)
            for x in reading.pool(pool_, "heldout")}
    trained = {x for pool_ in (reading.LANGUAGES, reading.FORMS, reading.TOPICS, reading.ENTITIES)
               for x in reading.pool(pool_, "train")}
    assert held and trained and not held & trained
    for split, allowed in (("train", trained), ("test", held)):
        for req, gold, _ in reading.rows("absurd", split)[:300]:
            _valid(req, gold, [])
            for qid, q in req["questions"].items():
                named = [(x, t) for x in held | trained
                         for t in reading.LANG_Q + reading.FORM_Q + reading.TOPIC_Q + reading.ENTITY_Q
                         if t.format(x=x) == q["instructions"]]
                for x, t in named:
                    assert x in allowed, (split, q["instructions"])
                    if t in reading.ENTITY_Q:
                        assert gold[qid] == "false" and x.split()[-1].lower() not in req["state"].lower()
                m = re.search(r'word "(\w+)"|mention "(\w+)"', q["instructions"])
                if m:
                    assert gold[qid] == "true" and (m.group(1) or m.group(2)) in req["state"]


def test_absurd_trains_on_empty_states_with_every_answer_no_and_leaves_the_suite_rows_as_they_were():
    rows = reading.rows("absurd", "train")
    empty = [(req, gold) for req, gold, _ in rows if not req["state"].strip()]
    assert 0.04 < len(empty) / len(rows) < 0.08 and {req["state"] for req, _ in empty} == set(reading.EMPTY_STATES)
    assert all(v == "false" for _, gold in empty for v in gold.values())
    english = [q["instructions"] for req, _ in empty for q in req["questions"].values() if "English" in q["instructions"]]
    assert english                                             # "Is this text in English?" on no text: no
    for split, digest in (("validation", "7bcd4e3ef835e634"), ("test", "67425e9eb1f799d2")):   # as before
        assert hashlib.sha256(json.dumps(reading.rows("absurd", split)).encode()).hexdigest()[:16] == digest
        assert all(req["state"].strip() for req, _, _ in reading.rows("absurd", split))


def test_reading_sources_are_family_sources_with_twins_and_outside_the_seen_splits():
    for name in ("documents", "quantities", "absurd", "snli"):
        assert SOURCES[name].kind == "typed" and name in SYNTHETIC_SOURCES and name not in seen_sources()
    row = next(r for r in reading.rows("documents", "validation") if r[2])
    ex = family_example("documents", row, random.Random(0))
    assert ex.twins == list(row[2])
    for qid, t in ex.targets.items():
        q = row[0]["questions"][qid]
        if q["type"] == "noul":
            assert t == ([1.0, 0.0] if row[1][qid] == "true" else [0.0, 1.0])


def _fake_snli(tmp_path, monkeypatch):
    monkeypatch.setenv("KEVLIKE_HOME", str(tmp_path))
    d = tmp_path / "snli"
    d.mkdir()
    lines = [{"gold_label": lab, "sentence1": "A man plays a guitar on a stage.", "sentence2": hyp}
             for lab, hyp in (("entailment", "A man is playing music."), ("contradiction", "The man is asleep."),
                              ("neutral", "The man is famous."), ("-", "Nobody agrees."))]
    for s in ("train", "test"):
        (d / f"{s}.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    snli._premises.cache_clear()
    snli.rows.cache_clear()


def test_snli_labels_map_to_golds(tmp_path, monkeypatch):
    _fake_snli(tmp_path, monkeypatch)
    try:
        (req, gold), = snli.rows("test")
        assert req["state"] == "A man plays a guitar on a stage."
        assert len(req["questions"]) == 3               # "-" (no gold label) dropped
        by_hyp = {}
        for qid, q in req["questions"].items():
            for h, lab in (("playing music", "entailment"), ("asleep", "contradiction"), ("famous", "neutral")):
                if h in q["instructions"]:
                    by_hyp[lab] = (q, gold[qid])
        for lab, (q, g) in by_hyp.items():
            if q["type"] == "choice":
                keys = next(k for k in snli.CHOICE_KEYS if g in k)
                assert set(q["criteria"]) == set(keys) and keys.index(g) == snli.LABELS.index(lab)
            else:
                assert g == ("true" if lab == "entailment" else "false")
                if lab == "neutral":   # "not said" is no only for "does the text say…" wordings
                    assert any(q["instructions"] == t.format(h="the man is famous") for t in snli.SAYS_TEMPLATES)
        # the premise hashes to one split: it is in train or validation, never both
        assert (len(snli.rows("train")) + len(snli.rows("validation"))) == 1
    finally:
        snli._premises.cache_clear()
        snli.rows.cache_clear()


def test_snli_clause():
    assert snli._clause("The man is asleep.") == "the man is asleep"
    assert snli._clause("NASA launches a rocket") == "NASA launches a rocket"
    assert snli._clause("I am here!") == "I am here"


def test_snli_fetch_refuses_a_wrong_hash_and_missing_data_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("KEVLIKE_HOME", str(tmp_path))
    fake = tmp_path / snli.SDIST_FILE
    with tarfile.open(fake, "w:gz") as tar:
        info = tarfile.TarInfo("x")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(DataUnavailableError, match="sha256 mismatch"):
        snli.fetch_snli(fake)
    snli._premises.cache_clear()
    snli.rows.cache_clear()
    try:
        with pytest.raises(DataUnavailableError, match="kevlike fetch snli"):
            snli.rows("train")
    finally:
        snli._premises.cache_clear()
        snli.rows.cache_clear()


def test_long_pads_a_typed_state_into_a_page_and_keeps_its_answers():
    from kevlike.data import facts
    req, gold = facts.rows("validation")[0]
    plain = family_example("facts", (req, gold), random.Random(3))
    assert plain.request["state"] == req["state"]                          # long = 0: unchanged
    lengths = []
    for seed in range(20):
        ex = family_example("facts", (req, gold), random.Random(seed), long=1.0)
        st = ex.request["state"]
        assert req["state"] in st and ex.gold == gold and ex.targets == plain.targets
        paras = st.split("\n\n")
        assert 5 <= len(paras) <= 13 and all(p in reading.PADDING for p in paras if p != req["state"])
        lengths.append(len(st.split()))
    assert min(lengths) > 100 and len({st for st in lengths}) > 5          # pages of several lengths


def test_quantity_texts_and_levels_hand_checked():
    assert [reading.quantity(u, v) for u, v in (("minutes", 45), ("minutes", 120), ("minutes", 100), ("money", 120),
                                                ("percent", 30), ("GB", 12), ("nights", 1), ("days", 3))] == \
        ["45 minutes", "2 hours", "100 minutes", "EUR 120", "30%", "12 GB", "1 night", "3 days"]
    assert reading.quantity("nights", 3, words=True) == "three nights"
    number = re.compile(r"\d+")
    for unit, (cuts, (lo, hi)) in reading.UNITS.items():
        for v in range(lo, hi + 1, max(1, (hi - lo) // 40)):
            levels, gold = reading._levels(random.Random(v), unit, v)
            assert 3 <= len(levels) <= 5 and 0 <= gold < len(levels)
            # each level's bounds, in minutes for "N hours"; the gold level holds v strictly inside
            bounds = [[int(x) * (60 if unit == "minutes" and "hour" in part else 1)
                       for x, part in ((m.group(), lv[m.start():m.end() + 6]) for m in number.finditer(lv))]
                      for lv in levels]
            assert all(len(b) == 1 for b in (bounds[0], bounds[-1])), levels
            inner = [b for b in bounds[1:-1]]
            assert all(len(b) == 2 and b[0] < b[1] for b in inner), levels
            low = [float("-inf")] + [b[0] for b in bounds[1:]]
            high = [b[-1] for b in bounds[:-1]] + [float("inf")]
            assert low[gold] < v < high[gold], (unit, v, levels, gold)


def test_quantities_rows_are_seeded_valid_and_consistent():
    rows = reading.rows("quantities", "validation")
    assert len(rows) == reading.SPLIT_SIZES["validation"]
    assert reading.quantities(random.Random(f"quantities:{reading.SPLIT_SEEDS['validation']}")) == rows[0]
    # how a small quantity may be stated: its digits or its number word ("3 nights", "three nights")
    spellings = {reading.quantity(u, v): {reading.quantity(u, v), reading.quantity(u, v, words=True)}
                 for u in reading.UNITS for v in range(1, 11)}
    n_pairs = 0
    for req, gold, twins in rows:
        _valid(req, gold, twins)
        assert 4 <= len(req["questions"]) <= 7
        n_pairs += len(twins)
        qs = req["questions"]
        for qid, q in qs.items():
            if q["type"] == "choice":       # the exact value: stated in the text, in digits or in words
                spelled = spellings.get(gold[qid], set())
                assert gold[qid] in req["state"] or any(t in req["state"] or t.capitalize() in req["state"]
                                                        for t in spelled), (gold[qid], req["state"])
    assert n_pairs >= len(rows)       # at least one more-than / at-most pair per row on average


def _wide_interval(level: str, unit: str) -> tuple[float, float]:
    """The closed interval of ``unit`` values a :func:`reading._wide_levels` level names, read from its text by
    hand-written rules (minutes in minutes, "N hours" and spoken durations converted), independent of the
    generator's own cut points."""
    spoken = {"a quarter of an hour": 15, "half an hour": 30, "three quarters of an hour": 45, "an hour": 60,
              "an hour and a half": 90, "two hours": 120, "three hours": 180, "four hours": 240}
    words = {w: i for i, w in enumerate(reading.NUM_WORDS)}

    def value(text: str) -> float:
        text = text.strip()
        if text in spoken:
            return spoken[text]
        m = re.fullmatch(r"(?:EUR |USD |GBP |[€$£])?(\w+)%?(?: (\w+))?", text)
        assert m, (level, text)
        n = int(m.group(1)) if m.group(1).isdigit() else words[m.group(1)]
        return n * 60 if unit == "minutes" and m.group(2) == "hours" else n

    zero = {z for zs in reading.ZERO_LEVELS.values() for z in zs}
    if level in zero:
        return (0, 0)
    for pattern, lo, hi in ((r"(?:less than|under|below) (.+)", None, -1e-9), (r"(?:up to|at most) (.+)", None, 0),
                            (r"(.+) or (?:less|fewer)", None, 0), (r"(?:more than|over|above) (.+)", 1e-9, None),
                            (r"at least (.+)", 0, None), (r"(.+) or more", 0, None)):
        m = re.fullmatch(pattern, level)
        if m:
            x = value(m.group(1))
            return (x + lo, float("inf")) if hi is None else (0, x + hi)          # quantities are >= 0
    m = re.fullmatch(r"(?:between|from) (.+)|(.+ to .+)", level)
    if m:                     # "between A and B", "from A to B", "A to B": the first split where both sides read
        body, sep = (m.group(1), " and " if level.startswith("between") else " to ") if m.group(1) else (m.group(2), " to ")
        parts = body.split(sep)
        for k in range(1, len(parts)):
            a, b = sep.join(parts[:k]), sep.join(parts[k:])
            if a.isdigit() and " " in b and not b[0] in "€$£":
                a = f"{a} {b.rsplit(' ', 1)[-1]}"                # "15 to 60 minutes": the unit said once
            try:
                return (value(a), value(b))
            except (AssertionError, KeyError):
                continue
        raise AssertionError(level)
    return (value(level), value(level))


def test_wide_levels_name_the_value_hand_checked():
    """Every scale of the ``numbers`` source, read back by hand-written rules: the gold level holds the value and
    no other level does; levels rise; every form, currency, spoken duration and the count scales occur."""
    assert reading.quantity("money", 120, money="£{v}") == "£120"
    assert reading.quantity("minutes", 90, spoken=True) == "an hour and a half"
    assert reading.quantity("minutes", 100, spoken=True) == "100 minutes"
    assert reading._span("15 minutes", "60 minutes", "between {a} and {b}") == "between 15 and 60 minutes"
    assert reading._span("EUR 50", "EUR 100", "{a} to {b}") == "EUR 50 to EUR 100"
    assert reading._span("half an hour", "an hour", "from {a} to {b}") == "from half an hour to an hour"
    seen = set()
    for i in range(3000):
        rng = random.Random(i)
        unit = rng.choice(list(reading.UNITS))
        lo, hi = reading.UNITS[unit][1]
        v = rng.randint(lo, min(hi, 8)) if i % 3 == 0 else rng.randint(lo, hi)
        money = rng.choice(reading.MONEY_FORMATS)
        levels, gold = reading._wide_levels(rng, unit, v, money)
        assert 3 <= len(levels) <= 5 and len(set(levels)) == len(levels), levels
        spans = [_wide_interval(lv, unit) for lv in levels]
        holds = [a <= v <= b for a, b in spans]
        assert holds[gold] and sum(holds) == 1, (unit, v, levels, gold, spans)
        assert all(x[0] <= y[0] and x[1] < y[1] for x, y in zip(spans, spans[1:])), (levels, spans)   # levels rise
        seen |= {lv.split(" ")[0] for lv in levels} | {"spoken" for lv in levels if "hour" in lv and "a" in lv.split()}
        seen |= {"zero" for a, b in spans if b == 0} | {"count" for a, b in spans if a == b and b > 0}
        seen |= {m for m in ("€", "$", "£", "GBP", "USD", "euros") if any(m in lv for lv in levels)}
    assert {"less", "under", "below", "up", "at", "between", "from", "more", "over", "above", "spoken", "zero",
            "count", "€", "$", "£", "GBP", "USD", "euros"} <= seen, seen


def test_numbers_rows_are_seeded_valid_and_read_back():
    rows = reading.rows("numbers", "validation")
    assert len(rows) == reading.SPLIT_SIZES["validation"]
    assert reading.numbers(random.Random(f"numbers:{reading.SPLIT_SEEDS['validation']}")) == rows[0]
    n_pairs, n_spoken = 0, 0
    for req, gold, twins in rows:
        _valid(req, gold, twins)
        assert 4 <= len(req["questions"]) <= 7
        n_pairs += len(twins)
        n_spoken += any(s in req["state"] for s in reading.SPOKEN_MINUTES.values())
        currencies = {f for f in reading.MONEY_FORMATS if re.search(re.escape(f).replace(r"\{v\}", r"\d+"), req["state"])}
        assert len(currencies) <= 1, currencies                     # one currency per text
    assert n_pairs >= len(rows) and n_spoken >= 5
    assert "numbers" in SOURCES and "numbers" in SYNTHETIC_SOURCES


# --- computed: numbers computed from the text ---------------------------------------------------------------

def _numbers_in(sentence: str) -> list[int]:
    """The numbers a sentence states, in order: digits (a clock time "14:05" as minutes after midnight) and the
    number words of :data:`reading.NUM_WORDS`."""
    words = {w: i for i, w in enumerate(reading.NUM_WORDS)}
    out = []
    for tok in re.findall(r"\d+:\d+|\d+|[a-z]+", sentence):
        if ":" in tok:
            h, m = tok.split(":")
            out.append(int(h) * 60 + int(m))
        elif tok.isdigit():
            out.append(int(tok))
        elif tok in words and tok not in ("one",):     # "one" also reads as a pronoun; the generator never writes it
            out.append(words[tok])
    return out


def test_computed_results_recomputed_from_the_sentence():
    """Every operation's result, recomputed by hand from the numbers its sentence states (never from the draw):
    the price after the discount, unit price times count, the part as a percentage of the total, the minutes between
    two clock times, the nights between two dates, the rise, two items plus delivery; the result itself is not
    among the stated numbers."""
    from kevlike.data import computed
    by_kind = {"discount": lambda n: n[0] * (100 - n[1]) / 100, "rate": lambda n: n[0] * n[1],
               "share": lambda n: min(n) * 100 / max(n), "clock": lambda n: n[1] - n[0], "dates": lambda n: n[1] - n[0],
               "rise": lambda n: n[1] - n[0], "total": lambda n: sum(n)}
    seen = set()
    for i in range(400):
        for make in computed.OPERATIONS:
            op = make(random.Random(i))
            nums = _numbers_in(op.sentence)
            assert len(nums) == (3 if op.kind == "total" else 2), op.sentence
            assert by_kind[op.kind](nums) == op.value, (op.sentence, op.value)
            assert op.value not in nums and op.value not in op.traps, op.sentence
            seen.add(op.kind)
    assert seen == set(by_kind)
    assert _numbers_in("The outage began at 14:05 and service was back at 14:47 the same day.") == [845, 887]
    assert _numbers_in("Tickets cost €12 each, and we bought seven of them.") == [12, 7]


def test_computed_rows_are_seeded_valid_and_their_levels_and_pairs_hold_the_result():
    """``computed`` rows: seeded per split, valid, 4–7 questions; each score's gold level (read back by
    :func:`_wide_interval`) holds the choice gold's value and no other level does; each more-than / at-most pair's
    gold agrees with the choice gold against the pair's cut; the exact result is almost never a number the text
    states."""
    from kevlike.data import computed
    rows = computed.rows("validation")
    assert len(rows) == computed.SPLIT_SIZES["validation"]
    assert computed.computed(random.Random(f"computed:{reading.SPLIT_SEEDS['validation']}")) == rows[0]
    assert SOURCES["computed"].kind == "typed" and "computed" in SYNTHETIC_SOURCES
    assert "computed" not in seen_sources()
    stated, n_choice, n_checked, n_score, n_pairs = 0, 0, 0, 0, 0
    for req, gold, twins in rows + computed.rows("test"):
        _valid(req, gold, twins)
        assert 4 <= len(req["questions"]) <= 7
        qs = req["questions"]
        for qid, q in qs.items():
            if q["type"] == "choice":
                n_choice += 1
                stated += gold[qid] in req["state"]
        # each operation asks its score, then its choice of the exact result (qN, qN+1): check the score's gold
        # level against that choice's gold where trimming kept both
        for qid, q in qs.items():
            if q["type"] != "score":
                continue
            n_score += 1
            twin = f"q{int(qid[1:]) + 1}"
            if qs.get(twin, {}).get("type") != "choice":
                continue
            unit = next((u for u, w in (("minutes", "minute"), ("minutes", "hour"), ("nights", "night"),
                                        ("percent", "%")) if w in gold[twin]), "money")
            h = _numbers_in(gold[twin])[0] * (60 if "hour" in gold[twin] else 1)
            spans = [_wide_interval(lv, unit) for lv in q["criteria"]]
            lo, hi = spans[int(gold[qid])]
            assert lo <= h <= hi and sum(a <= h <= b for a, b in spans) == 1, (q, gold[twin])
            n_checked += 1
            for pair in (f"q{int(qid[1:]) + 2}", f"q{int(qid[1:]) + 3}"):     # its more-than question, if kept
                text = qs.get(pair, {}).get("instructions", "")
                if " more than " in text:
                    cut = text.split(" more than ")[1]
                    k = _numbers_in(cut)[0] * (60 if "hour" in cut else 1)
                    assert gold[pair] == ("true" if h > k else "false"), (text, gold[twin])
                    n_pairs += 1
    print(f"levels checked {n_checked} of {n_score}, pairs {n_pairs}, choice golds stated {stated} of {n_choice}")
    assert n_pairs >= 0.5 * n_checked
    assert n_checked >= 0.6 * n_score          # the rest: the result's choice question was trimmed
    assert stated / n_choice < 0.05
    for split, digest in (("validation", "22a57c432731be86"), ("test", "966a2e44a54d148e")):    # golden rows
        assert hashlib.sha256(json.dumps(computed.rows(split)).encode()).hexdigest()[:16] == digest
