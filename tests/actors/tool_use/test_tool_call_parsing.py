"""The tool-call parser (actors/tool_use/parsing.py): both forms, nested and escaped values, several calls."""

from actors.tool_use.parsing import ToolCall, parse_reply, tool_specs


def test_json_form():
    parsed = parse_reply('I will look.\n<tool_call>\n{"name": "get_balance", "arguments": {"account": "checking"}}\n</tool_call>')
    assert parsed.answer is None and parsed.malformed == 0
    assert parsed.calls == [ToolCall("get_balance", {"account": "checking"})]


def test_json_form_parameters_key_and_string_arguments():
    parsed = parse_reply('<tool_call>{"name": "a", "parameters": {"x": 1}}</tool_call>'
                         '<tool_call>{"name": "b", "arguments": "{\\"y\\": [1, 2]}"}</tool_call>')
    assert parsed.calls == [ToolCall("a", {"x": 1}), ToolCall("b", {"y": [1, 2]})]


def test_xml_parameter_form_decodes_json_values_and_unescapes_html():
    reply = ("<tool_call>\n<function=create_event>\n<parameter=title>Q&amp;A &lt;team&gt;</parameter>\n"
             "<parameter=hour>10</parameter>\n<parameter=attendees>[\"Ana\", \"Ben\"]</parameter>\n"
             "<parameter=note>say &quot;hi&quot;</parameter>\n</function>\n</tool_call><|im_end|>")
    parsed = parse_reply(reply)
    assert parsed.calls == [ToolCall("create_event", {"title": "Q&A <team>", "hour": 10, "attendees": ["Ana", "Ben"],
                                                      "note": 'say "hi"'})]


def test_nested_json_arguments():
    parsed = parse_reply('<tool_call>{"name": "f", "arguments": {"filter": {"range": {"lo": 1, "hi": [2, {"z": null}]}}}}</tool_call>')
    assert parsed.calls[0].arguments == {"filter": {"range": {"lo": 1, "hi": [2, {"z": None}]}}}


def test_html_escaped_json_block():
    parsed = parse_reply('<tool_call>{&quot;name&quot;: &quot;g&quot;, &quot;arguments&quot;: {&quot;q&quot;: &quot;a&amp;b&quot;}}</tool_call>')
    assert parsed.calls == [ToolCall("g", {"q": "a&b"})]


def test_several_calls_in_one_turn_keep_their_order_and_mixed_forms():
    reply = ('<tool_call>{"name": "one", "arguments": {}}</tool_call> then '
             '<tool_call><function=two><parameter=k>v</parameter></function></tool_call>'
             '<tool_call>{"name": "three", "arguments": {"n": 3}}</tool_call>')
    assert [c.name for c in parse_reply(reply).calls] == ["one", "two", "three"]


def test_answer_wins_and_think_is_ignored():
    assert parse_reply('<think><tool_call>{"name": "x"}</tool_call></think><answer> done </answer>').answer == "done"
    reply = '<think>maybe <answer>no</answer></think><tool_call>{"name": "x", "arguments": {}}</tool_call>'
    assert parse_reply(reply).calls == [ToolCall("x", {})]


def test_malformed_blocks_are_counted():
    parsed = parse_reply('<tool_call>{"name": broken</tool_call><tool_call>{"name": "ok", "arguments": {}}</tool_call>')
    assert parsed.malformed == 1 and parsed.calls == [ToolCall("ok", {})]
    assert parse_reply("<tool_call>not json</tool_call>").malformed == 1
    assert parse_reply('<tool_call>{"arguments": {}}</tool_call>').malformed == 1  # no name
    assert parse_reply('<tool_call>{"name": "x", "arguments": [1]}</tool_call>').malformed == 1
    plain = parse_reply("I think the answer is 4.")
    assert plain.answer is None and not plain.calls and not plain.malformed


def test_tool_specs_are_openai_functions():
    specs = tool_specs({"f": {"description": "d", "parameters": {"type": "object", "properties": {}}}})
    assert specs == [{"type": "function", "function": {"name": "f", "description": "d",
                                                       "parameters": {"type": "object", "properties": {}}}}]
