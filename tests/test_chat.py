"""Chat rendering is token-exact and prefix-stable; the tool-call parser never raises."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lopd.chat import (
    ChatRenderer,
    example_call,
    format_tool_call,
    parse_tool_calls,
    tool_system_prompt,
    validate_arguments,
)

TOOLS = [
    {"name": "transfer", "description": "Move money",
     "parameters": {"type": "object",
                    "properties": {"source": {"type": "string"}, "target": {"type": "string"},
                                   "amount": {"type": "number"},
                                   "currency": {"type": "string", "enum": ["USD", "EUR"]}},
                    "required": ["source", "target", "amount"]}},
    {"name": "count", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}},
]

roles = st.sampled_from(["user", "assistant", "tool"])
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
messages = st.lists(st.fixed_dictionaries({"role": roles, "content": texts}), min_size=1, max_size=6)


def _conversation(tail):
    return [{"role": "system", "content": tool_system_prompt("Be useful.", TOOLS)}, *tail]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=messages, cut=st.integers(min_value=0, max_value=6))
def test_appending_turns_equals_full_render(smol_tokenizer, tail, cut):
    renderer = ChatRenderer(smol_tokenizer)
    conversation = _conversation(tail)
    cut = min(cut, len(conversation))
    ids, mask = renderer.render(conversation[:cut])
    for index in range(cut, len(conversation)):
        seg_ids, seg_mask = renderer.render_message(conversation[index], conversation[:index])
        ids, mask = ids + seg_ids, mask + seg_mask
    assert (ids, mask) == renderer.render(conversation)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=messages)
def test_render_matches_the_tokenizers_chat_template(smol_tokenizer, tail):
    # an assistant turn keeps the ids it was sampled as, after the header's newline; the
    # template's one-string tokenization can merge that newline with leading whitespace
    tail = [m for m in tail if m["role"] != "assistant" or not m["content"][:1].isspace()]
    conversation = _conversation(tail)
    ids, _ = ChatRenderer(smol_tokenizer).render(conversation, add_generation_prompt=True)
    reference = smol_tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    assert ids == smol_tokenizer(reference, add_special_tokens=False)["input_ids"]


def test_action_mask_covers_exactly_assistant_content_and_end_of_turn(smol_tokenizer):
    renderer = ChatRenderer(smol_tokenizer)
    answer = format_tool_call("count", {"n": 3})
    ids, mask = renderer.render([{"role": "user", "content": "count to 3"},
                                 {"role": "assistant", "content": answer},
                                 {"role": "tool", "content": "1 2 3"}])
    supervised = [t for t, m in zip(ids, mask) if m]
    assert supervised == smol_tokenizer(answer, add_special_tokens=False)["input_ids"] + [
        renderer.end_of_turn_id]
    assert smol_tokenizer.decode(supervised[:-1]) == answer


def test_closing_a_sampled_turn_adds_end_of_turn_only_when_cut(smol_tokenizer):
    renderer = ChatRenderer(smol_tokenizer)
    stopped = [5, 6, renderer.end_of_turn_id]
    ids, mask = renderer.close_sampled_turn(stopped)
    assert renderer.end_of_turn_id not in ids and mask == [0] * len(ids)
    ids, mask = renderer.close_sampled_turn([5, 6])
    assert ids[0] == renderer.end_of_turn_id and mask == [0] * len(ids)


def test_tiny_model_shares_the_renderer(tiny, smol_tokenizer):
    _, tokenizer = tiny
    conversation = _conversation([{"role": "user", "content": "hi"}])
    assert ChatRenderer(tokenizer).render(conversation) == ChatRenderer(smol_tokenizer).render(conversation)


def test_parser_accepts_several_calls_and_keeps_text():
    text = ("Sure. " + format_tool_call("transfer", {"source": "a", "target": "b", "amount": 5})
            + "\n" + format_tool_call("count", {"n": 2}))
    turn = parse_tool_calls(text, TOOLS)
    assert [c.name for c in turn.calls] == ["transfer", "count"] and not turn.errors
    assert turn.content == "Sure."


def test_parser_turns_malformed_calls_into_errors():
    turn = parse_tool_calls(
        '<tool_call>{"name": "nope", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "count", "arguments": {"n": "two"}}</tool_call>'
        '<tool_call>{"name": "transfer", "arguments": {"source": "a"}}</tool_call>'
        '<tool_call>{"name": "count", "arguments": {"n": true}}</tool_call>'
        '<tool_call>{"name": "count", "arguments": {"m": 1}}</tool_call>'
        "<tool_call>not json</tool_call>"
        '<tool_call>["count"]</tool_call>'
        '<tool_call>{"name": "count", "arguments": {}}', TOOLS)
    assert not turn.calls and len(turn.errors) == 8
    assert "unknown tool 'nope'" in turn.errors[0]
    assert "must be integer" in turn.errors[1] and "must be integer" in turn.errors[3]
    assert "missing required argument 'target'" in turn.errors[2]
    assert "unknown argument 'm'" in turn.errors[4]
    assert "invalid JSON" in turn.errors[5] and "unclosed" in turn.errors[7]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["", "<tool_call>", "</tool_call>", '{"name":']))
def test_parser_never_raises(text, splice):
    turn = parse_tool_calls(splice + text + splice, TOOLS)
    assert all(isinstance(e, str) for e in turn.errors)


def test_example_calls_validate_against_their_schema():
    for tool in TOOLS:
        call = json.loads(example_call(tool)[len("<tool_call>"):-len("</tool_call>")])
        assert validate_arguments(call["arguments"], tool) == []
