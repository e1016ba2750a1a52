"""One test per wire-format rule (DESIGN §4); every error names the field path and the rule."""

import copy
import json

import pytest

from kevlike.request.schema import Limits, Option, RequestError, parse_request, validate_request

from tiny import REQUEST


def errors_of(obj, limits=Limits()):
    with pytest.raises(RequestError) as e:
        if isinstance(obj, (str, bytes)):
            parse_request(obj, limits)
        else:
            validate_request(obj, limits)
    return e.value


def with_question(q, qid="q"):
    return {"state": "s", "questions": {qid: q}}


def only_error(obj, **kw):
    err = errors_of(obj, **kw)
    assert len(err.errors) == 1, err.errors
    return err.errors[0]


def test_valid_request_round_trips_into_typed_objects():
    r = validate_request(REQUEST)
    assert r.model == "kevlike-default"
    assert [q.id for q in r.questions] == ["urgent", "team", "anger", "lazy"]
    assert r.questions[0].options == (Option("true", "customer is blocked or losing money"), Option("false", None))
    assert [o.key for o in r.questions[1].options] == ["billing", "sales", "tech"]
    assert r.questions[2].options == (Option("0", "Calm"), Option("1", "Frustrated"), Option("2", "Very angry"))
    assert r.questions[3].options == (Option("true", None), Option("false", None))


def test_state_may_be_object_or_array_or_empty():
    for state in ({"b": 1, "a": [1, 2]}, [1, "x"], "", {}):
        assert validate_request({"state": state, "questions": REQUEST["questions"]}).state == state


def test_state_must_be_text():
    for bad in (3, None, True):
        e = only_error({"state": bad, "questions": REQUEST["questions"]})
        assert e["loc"] == ["body", "state"] and e["type"] == "text_type"


def test_missing_fields():
    err = errors_of({})
    assert {tuple(e["loc"]) for e in err.errors} == {("body", "state"), ("body", "questions")}
    assert all(e["type"] == "missing" for e in err.errors)


def test_request_must_be_object():
    assert only_error([1, 2])["type"] == "model_type"


def test_unknown_top_level_fields_are_ignored_and_named():
    """Jev ignores unknown top-level fields (clients add tracing fields); inside a question a typo changes
    the meaning, so it stays an error."""
    req = validate_request(dict(REQUEST, x_trace_id="abc", seed=7, stream=True))
    assert req.ignored_fields == ("x_trace_id", "seed", "stream")
    assert [q.id for q in req.questions] == list(REQUEST["questions"])
    assert validate_request(REQUEST).ignored_fields == ()
    e = only_error(with_question({"type": "noul", "instructions": "x", "critera": None}))
    assert e["loc"] == ["body", "questions", "q", "critera"] and e["type"] == "extra_forbidden"


def test_noul_with_criteria_may_omit_instructions():
    q = validate_request(with_question({"type": "noul", "criteria": {"true": "the order is late", "false": None}}))
    assert q.questions[0].instructions == "" and q.questions[0].options[0].description == "the order is late"
    for bad in ({"type": "noul", "criteria": None}, {"type": "noul", "criteria": {}},
                {"type": "noul", "criteria": {"true": None, "false": None}}, {"type": "noul", "criteria": {"true": " "}},
                {"type": "choice", "criteria": {"a": None, "b": None}}):
        e = only_error(with_question(bad))
        assert e["loc"] == ["body", "questions", "q", "instructions"] and e["type"] == "missing"


def test_number_out_of_range_names_the_literal_and_the_field():
    body = '{"state": {"amount": 1e400, "ok": 1.5e308}, "questions": {"q": {"type": "noul", "instructions": "x"}}}'
    e = only_error(body)
    assert e["loc"] == ["body", "state", "amount"] and e["type"] == "number_out_of_range"
    assert "1e400" in e["msg"] and "inf" not in e["msg"]
    e = only_error(body.replace("1e400", "-2.5E+999"))
    assert "-2.5E+999" in e["msg"]
    assert parse_request(body.replace("1e400", "1e300")).state == {"amount": 1e300, "ok": 1.5e308}


def test_counts_are_pluralised_and_deep_paths_shortened():
    e = only_error(with_question({"type": "choice", "instructions": "x", "criteria": {"a": None}}))
    assert e["msg"] == "choice has 1 option; it needs 2 to 255"
    e = only_error(with_question({"type": "choice", "instructions": "x", "criteria": {str(i): None for i in range(256)}}))
    assert e["msg"] == "choice has 256 options; it needs 2 to 255 (`kevlike decide/serve --max-options N` raises the limit)"
    e = only_error(with_question({"type": "score", "instructions": "x", "criteria": ["low"]}))
    assert e["msg"] == "score has 1 level; it needs 2 to 10"
    deep = '{"state": ' + "[" * 70 + "]" * 70 + ', "questions": {"q": {"type": "noul", "instructions": "x"}}}'
    err = errors_of(deep)
    assert err.one_line() == "body.state[0][0][0][0]…(57 levels)…[0][0]: JSON nesting exceeds the limit of 64"


def test_model_must_be_string():
    assert only_error(dict(REQUEST, model=3))["loc"] == ["body", "model"]


def test_questions_must_be_nonempty_object():
    assert only_error({"state": "s", "questions": []})["type"] == "dict_type"
    assert only_error({"state": "s", "questions": {}})["type"] == "too_short"


def test_question_count_limit():
    qs = {str(i): {"type": "noul", "instructions": "x"} for i in range(4)}
    e = only_error({"state": "s", "questions": qs}, limits=Limits(max_questions=3))
    assert e["type"] == "too_long" and "limit is 3" in e["msg"]


def test_empty_question_id_rejected():
    e = only_error(with_question({"type": "noul", "instructions": "x"}, qid=""))
    assert e["loc"] == ["body", "questions", ""] and "non-empty" in e["msg"]


def test_unknown_question_type():
    e = only_error(with_question({"type": "yesno", "instructions": "x"}))
    assert e["loc"] == ["body", "questions", "q", "type"] and e["type"] == "union_tag_invalid"


def test_missing_type_and_instructions():
    assert only_error(with_question({"instructions": "x"}))["loc"] == ["body", "questions", "q", "type"]
    e = only_error(with_question({"type": "noul"}))
    assert e["loc"] == ["body", "questions", "q", "instructions"] and e["type"] == "missing"


def test_instructions_must_be_text():
    e = only_error(with_question({"type": "noul", "instructions": 5}))
    assert e["loc"] == ["body", "questions", "q", "instructions"] and e["type"] == "text_type"


def test_unknown_question_field():
    e = only_error(with_question({"type": "noul", "instructions": "x", "critera": None}))
    assert e["loc"] == ["body", "questions", "q", "critera"] and e["type"] == "extra_forbidden"


def test_noul_criteria_only_true_false():
    e = only_error(with_question({"type": "noul", "instructions": "x", "criteria": {"yes": "a"}}))
    assert e["loc"] == ["body", "questions", "q", "criteria", "yes"]
    assert only_error(with_question({"type": "noul", "instructions": "x", "criteria": "a"}))["type"] == "dict_type"


def test_noul_criteria_one_sided_or_null():
    r = validate_request(with_question({"type": "noul", "instructions": "x", "criteria": {"false": "no"}}))
    assert r.questions[0].options == (Option("true", None), Option("false", "no"))


@pytest.mark.parametrize("n,ok", [(1, False), (2, True), (255, True), (256, False)])
def test_choice_needs_2_to_255_options(n, ok):
    q = {"type": "choice", "instructions": "x", "criteria": {f"o{i}": None for i in range(n)}}
    if ok:
        assert len(validate_request(with_question(q)).questions[0].options) == n
    else:
        e = only_error(with_question(q))
        assert e["loc"] == ["body", "questions", "q", "criteria"] and "2 to 255" in e["msg"]


def test_choice_criteria_required_and_typed():
    assert only_error(with_question({"type": "choice", "instructions": "x"}))["type"] == "missing"
    assert only_error(with_question({"type": "choice", "instructions": "x", "criteria": ["a", "b"]}))["type"] == "dict_type"
    e = only_error(with_question({"type": "choice", "instructions": "x", "criteria": {"a": 1, "b": None}}))
    assert e["loc"] == ["body", "questions", "q", "criteria", "a"]


def test_choice_empty_option_key_rejected():
    e = only_error(with_question({"type": "choice", "instructions": "x", "criteria": {"": None, "b": None}}))
    assert e["type"] == "string_too_short"


@pytest.mark.parametrize("n,ok", [(1, False), (2, True), (10, True), (11, False)])
def test_score_needs_2_to_10_levels(n, ok):
    q = {"type": "score", "instructions": "x", "criteria": [f"l{i}" for i in range(n)]}
    if ok:
        assert [o.key for o in validate_request(with_question(q)).questions[0].options] == [str(i) for i in range(n)]
    else:
        assert "2 to 10" in only_error(with_question(q))["msg"]


def test_score_legacy_map_form_rejected():
    e = only_error(with_question({"type": "score", "instructions": "x", "criteria": {"0": "low", "1": "high"}}))
    assert e["type"] == "score_legacy_form" and "array" in e["msg"]


def test_score_level_must_be_text():
    e = only_error(with_question({"type": "score", "instructions": "x", "criteria": ["a", None]}))
    assert e["loc"] == ["body", "questions", "q", "criteria", 1]


def test_duplicate_question_id_rejected():
    body = '{"state": "s", "questions": {"a": {"type": "noul", "instructions": "x"}, "a": {"type": "noul", "instructions": "y"}}}'
    e = only_error(body)
    assert e["loc"] == ["body", "questions", "a"] and e["type"] == "duplicate_key"


def test_duplicate_key_anywhere_rejected():
    body = '{"state": "s", "questions": {"a": {"type": "choice", "instructions": "x", "criteria": {"k": null, "k": null, "j": null}}}}'
    assert only_error(body)["loc"] == ["body", "questions", "a", "criteria", "k"]


def test_invalid_json_and_utf8_and_nan():
    assert only_error("{")["type"] == "json_invalid"
    assert only_error(b'{"state": "\xff"}')["type"] == "json_invalid"
    assert only_error('{"state": NaN, "questions": {}}')["type"] == "json_invalid"


def test_lone_surrogate_rejected():
    body = json.dumps({"state": "s", "questions": {"\ud800": {"type": "noul", "instructions": "x"}}})
    e = only_error(body)
    assert e["type"] == "string_unicode" and e["loc"] == ["body", "questions"]
    e = only_error(json.dumps({"state": "bad \udc80", "questions": REQUEST["questions"]}))
    assert e["loc"] == ["body", "state"]


def test_nesting_limit():
    deep = {"state": json.loads("[" * 70 + "]" * 70), "questions": REQUEST["questions"]}
    assert only_error(deep)["type"] == "json_too_deep"
    assert only_error('{"state": ' + "[" * 100000 + "]" * 100000 + "}")["type"] == "json_too_deep"


def test_body_size_limit_is_413():
    err = errors_of(json.dumps(REQUEST), limits=Limits(max_body_bytes=100))
    assert err.status == 413 and "limit is 100" in err.errors[0]["msg"]


def test_all_errors_are_reported():
    bad = copy.deepcopy(REQUEST)
    bad["questions"]["team"]["criteria"] = {"only": None}
    bad["questions"]["anger"]["criteria"] = {"0": "a", "1": "b"}
    err = errors_of(bad)
    assert [e["loc"][2] for e in err.errors] == ["team", "anger"]
    assert "team.criteria" in str(err) and "anger.criteria" in str(err)


def test_limits_validate_on_construction():
    with pytest.raises(ValueError, match="max_options"):
        Limits(max_options=0)


def test_python_api_rejects_non_json_values():
    e = only_error({"state": "x", "questions": {1: {"type": "noul", "instructions": "x"}}})
    assert e["type"] == "key_type" and e["loc"] == ["body", "questions", "1"]
    assert only_error({"state": {1: "a"}, "questions": REQUEST["questions"]})["type"] == "key_type"
    err = errors_of({"state": {"v": float("nan"), "w": [float("-inf")]}, "questions": REQUEST["questions"]})
    assert [x["loc"] for x in err.errors] == [["body", "state", "v"], ["body", "state", "w", 0]]
    assert only_error({"state": {"s": {1, 2}}, "questions": REQUEST["questions"]})["type"] == "json_invalid"


def test_bom_is_accepted_and_huge_numbers_explained():
    body = json.dumps(REQUEST).encode()
    assert parse_request(b"\xef\xbb\xbf" + body) == parse_request(body)
    e = only_error('{"state": ' + "9" * 5000 + ', "questions": {}}')
    assert e["loc"] == ["body", "state"] and e["type"] == "number_out_of_range"
    assert e["msg"] == "integer has 5000 digits; the limit is 4300" and "sys." not in e["msg"]


def test_integers_beyond_4300_digits_are_refused_with_their_field_on_the_wire_and_in_python():
    q = '"questions": {"q": {"type": "noul", "instructions": "x"}}'
    at_limit = "-" + "7" * 4300   # 4300 digits and a sign: kept exactly
    assert parse_request('{"state": {"n": %s}, %s}' % (at_limit, q)).state == {"n": int(at_limit)}
    for body, loc in (('{"state": {"n": [1, -%s]}, %s}' % ("8" * 4301, q), ["body", "state", "n", 1]),
                      ('{"state": "x", "x_abstain_above": %s, %s}' % ("1" * 5000, q), ["body", "x_abstain_above"]),
                      ('{"state": "x", "unknown": %s, %s}' % ("1" * 5000, q), ["body", "unknown"])):
        e = only_error(body)
        assert (e["loc"], e["type"]) == (loc, "number_out_of_range") and "the limit is 4300" in e["msg"], e
    # the Python API: an int object that str() could not render is refused by validate_request, not by decide
    for obj, loc in (({"state": {"n": 10 ** 5000}, "questions": REQUEST["questions"]}, ["body", "state", "n"]),
                     ({**REQUEST, "x_abstain_above": -(10 ** 4300)}, ["body", "x_abstain_above"])):
        e = only_error(obj)
        assert e["loc"] == loc and e["msg"] == "integer has more than 4300 digits; the limit is 4300", e
    assert validate_request({"state": {"n": 10 ** 4300 - 1}, "questions": REQUEST["questions"]}).state["n"] > 0


def test_messages_use_json_spelling_and_visible_paths():
    e = only_error(with_question({"type": None, "instructions": "x"}))
    assert "unknown question type null" in e["msg"]
    err = errors_of(with_question({"type": "choice", "instructions": "x", "criteria": {"": None, "b": None}}))
    assert 'body.questions.q.criteria[""]: option key must be a non-empty string' in str(err)


def test_json_schema_is_generated_from_the_models_with_the_limits():
    """The OpenAPI body schema comes from the pydantic models: the limits in force, the discriminated
    union on ``type``, unknown fields allowed at the top and forbidden inside a question."""
    from kevlike.request.schema import request_json_schema
    s = request_json_schema(Limits(max_questions=7, max_options=9, max_levels=4))
    defs = s["$defs"]
    assert s["required"] == ["state", "questions"] and s["additionalProperties"] is True
    assert s["properties"]["questions"]["maxProperties"] == 7 and s["properties"]["questions"]["minProperties"] == 1
    assert defs["ChoiceQuestion"]["properties"]["criteria"]["maxProperties"] == 9
    assert (defs["ScoreQuestion"]["properties"]["criteria"]["minItems"],
            defs["ScoreQuestion"]["properties"]["criteria"]["maxItems"]) == (2, 4)
    union = s["properties"]["questions"]["additionalProperties"]
    assert union["discriminator"]["propertyName"] == "type"
    assert set(union["discriminator"]["mapping"]) == {"noul", "choice", "score"}     # no internal fallback
    assert defs["NoulQuestion"]["required"] == ["type"]               # instructions may be omitted
    assert defs["ChoiceQuestion"]["required"] == ["type", "instructions", "criteria"]
    assert all(defs[m]["additionalProperties"] is False for m in ("NoulQuestion", "ChoiceQuestion", "ScoreQuestion"))
