"""The official anthropic Python library against a running fusion node.

Driven by TestPythonSDK (sdk_clients_test.go), which starts the nodes and
sets FUSION_BASE_URL (auth on, key FUSION_API_KEY), FUSION_TIGHT_URL (no
auth, one generation at a time), FUSION_SMALL_URL (no auth, an 8 KiB body
limit, the demo model pinned and filling the memory budget), FUSION_MODEL
and FUSION_THINKER. The demo model writes varied random text and does not
stop on its own; the thinker (another seed) writes visible text inside
<think> and never closes the block itself.
"""

import collections
import os

import anthropic
import pytest

BASE = os.environ["FUSION_BASE_URL"]
KEY = os.environ["FUSION_API_KEY"]
TIGHT = os.environ["FUSION_TIGHT_URL"]
SMALL = os.environ["FUSION_SMALL_URL"]
MODEL = os.environ["FUSION_MODEL"]
THINKER = os.environ["FUSION_THINKER"]
MSGS = [{"role": "user", "content": "Tell me a story"}]


def client(base=BASE, key=KEY):
    return anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)


def test_create():
    m = client().messages.create(model=MODEL, max_tokens=5, messages=MSGS, system="Be brief.",
                                 metadata={"user_id": "u1"},
                                 # this SDK no longer declares the sampling fields; the API still takes them
                                 extra_body={"temperature": 0.7, "top_p": 0.9, "top_k": 20})
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL
    assert m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"]
    assert m.stop_reason == "max_tokens" and m.stop_sequence is None
    assert m.usage.output_tokens == 5 and m.usage.input_tokens > 0
    assert m.usage.cache_read_input_tokens is not None


def test_stop_sequences():
    # A stop string from the middle of a greedy answer; the same greedy
    # request then stops right before it.
    greedy = {"temperature": 0}
    m = client().messages.create(model=MODEL, max_tokens=20, messages=MSGS, extra_body=greedy)
    text = m.content[0].text
    if len(text) < 2:
        pytest.skip(f"the demo model wrote {text!r}: too little to test stop_sequences")
    stop = text[len(text) // 2:]
    m = client().messages.create(model=MODEL, max_tokens=20, messages=MSGS, stop_sequences=[stop], extra_body=greedy)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert m.content[0].text == text[:text.index(stop)]


def test_stream():
    with client().messages.stream(model=MODEL, max_tokens=6, messages=MSGS) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert final.content[0].type == "text" and final.content[0].text == text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 6
    assert final.id.startswith("msg_")


def test_stream_events():
    events = list(client().messages.create(model=MODEL, max_tokens=2, messages=MSGS, stream=True))
    types = [e.type for e in events]  # the SDK drops pings; the demo model may write nothing
    assert types[:2] == ["message_start", "content_block_start"]
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(types[2:-3]) <= {"content_block_delta"} and len(types) <= 7
    assert events[0].message.usage.input_tokens > 0 and events[0].message.usage.output_tokens == 1
    assert events[-2].delta.stop_reason == "max_tokens" and events[-2].usage.output_tokens == 2


def test_count_tokens():
    c = client()
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    n = c.messages.count_tokens(model=MODEL, messages=MSGS, system=system)
    m = c.messages.create(model=MODEL, max_tokens=1, messages=MSGS, system=system)
    assert n.input_tokens == m.usage.input_tokens + m.usage.cache_read_input_tokens
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    with_tools = c.messages.count_tokens(model=MODEL, messages=MSGS, system=system, tools=tools)
    assert with_tools.input_tokens > n.input_tokens
    # thinking enabled opens <think> in the prompt: counted as generation renders it
    thinking = {"type": "enabled", "budget_tokens": 1024}
    n = c.messages.count_tokens(model=MODEL, messages=MSGS, system=system, thinking=thinking)
    m = c.messages.create(model=MODEL, max_tokens=1025, messages=MSGS, system=system, thinking=thinking, stop_sequences=["\n"])
    assert n.input_tokens == m.usage.input_tokens + m.usage.cache_read_input_tokens + m.usage.cache_creation_input_tokens


def test_tool_history():
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": False}]},
    ]
    m = client().messages.create(model=MODEL, max_tokens=3, messages=messages, tools=tools,
                                 tool_choice={"type": "auto"}, thinking={"type": "disabled"})
    assert m.stop_reason == "max_tokens"


def test_prefill_and_thinking_budget():
    """A final assistant message is continued: the answer holds only the continuation."""
    prefix = "Once upon a time, in a land far away"
    m = client().messages.create(model=MODEL, max_tokens=4, messages=MSGS + [{"role": "assistant", "content": prefix}])
    assert m.stop_reason in ("max_tokens", "end_turn")
    assert prefix not in "".join(b.text for b in m.content if b.type == "text")
    with pytest.raises(anthropic.BadRequestError) as e:
        client().messages.create(model=MODEL, max_tokens=4, messages=MSGS + [{"role": "assistant", "content": prefix + " "}])
    assert "trailing whitespace" in e.value.body["error"]["message"]
    m = client().messages.create(model=MODEL, max_tokens=1100, messages=[MSGS[0], MSGS[0]],
                                 thinking={"type": "enabled", "budget_tokens": 1024}, stop_sequences=["."])
    assert m.stop_reason in ("max_tokens", "end_turn", "stop_sequence")


def test_thinking():
    """thinking enabled: the hybrid template's generation prompt is opened into
    <think>, so the answer is a thinking block (with its signature) and then
    text; budget_tokens closes the thinking, which the thinker would not.
    The block goes back as it came; edited, it is refused."""
    budget, max_tokens = 1024, 1100
    thinking = {"type": "enabled", "budget_tokens": budget}
    m = client().messages.create(model=THINKER, max_tokens=max_tokens, messages=MSGS, thinking=thinking)
    # (the reason, usage and thinking's tail say what ended the answer, if this fails)
    assert [b.type for b in m.content] == ["thinking", "text"], (m.stop_reason, m.usage, m.content[-1].model_dump_json()[-300:])
    assert m.content[0].thinking.strip() and m.content[0].signature
    assert m.content[1].text
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == max_tokens

    starts, deltas, thought, helper, signatures = [], collections.Counter(), [], [], []
    with client().messages.stream(model=THINKER, max_tokens=max_tokens, messages=MSGS, thinking=thinking) as s:
        for ev in s:
            if ev.type == "content_block_start":
                starts.append(ev.content_block.type)
            elif ev.type == "content_block_delta":
                deltas[ev.delta.type] += 1
                if ev.delta.type == "thinking_delta":
                    thought.append(ev.delta.thinking)
                elif ev.delta.type == "signature_delta":
                    signatures.append(ev.delta.signature)
            elif ev.type == "thinking":  # the SDK's helper event, with the block so far
                helper.append(ev.snapshot)
        final = s.get_final_message()
    assert starts == ["thinking", "text"], (final.stop_reason, final.usage, deltas, len("".join(thought)))
    assert deltas["signature_delta"] == 1 and deltas["thinking_delta"] > 0
    # The thinker never closes its thinking, so a text block at all means the
    # budget closed it: at most budget thinking tokens, then </think>, then
    # the rest of max_tokens as text. Each delta carries at least one token
    # (a token that ends inside a character waits for the next).
    assert 0 < deltas["thinking_delta"] <= budget and 0 < deltas["text_delta"] <= max_tokens - budget
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "".join(thought) == helper[-1] and final.content[0].signature == signatures[-1]
    assert final.content[1].text and final.stop_reason == "max_tokens" and final.usage.output_tokens == max_tokens

    block = final.content[0]
    history = MSGS + [{"role": "assistant", "content": [block, final.content[1]]}, {"role": "user", "content": "Go on."}]
    again = client().messages.create(model=THINKER, max_tokens=2, messages=history)
    assert again.usage.output_tokens == 2
    edited = {"type": "thinking", "thinking": block.thinking + " I was wrong.", "signature": block.signature}
    with pytest.raises(anthropic.BadRequestError) as e:
        client().messages.create(model=THINKER, max_tokens=2, messages=MSGS + [{"role": "assistant", "content": [edited, final.content[1]]},
                                                                               {"role": "user", "content": "Go on."}])
    assert e.value.status_code == 400 and e.value.body["error"]["type"] == "invalid_request_error"
    assert "Invalid `signature` in `thinking` block" in e.value.body["error"]["message"]


def test_not_found():
    with pytest.raises(anthropic.NotFoundError) as e:
        client().messages.create(model="no-such-model", max_tokens=2, messages=MSGS)
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "not_found_error"


def test_bad_request():
    with pytest.raises(anthropic.BadRequestError) as e:
        client().messages.create(model=MODEL, max_tokens=2, messages=MSGS, extra_body={"temperature": 1.5})
    assert e.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        client().messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
    assert "text only" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        client().messages.create(model=MODEL, max_tokens=2, messages=MSGS, tool_choice={"type": "any"},
                                 tools=[{"name": "t", "input_schema": {"type": "object", "properties": {
                                     "s": {"type": "string", "contentMediaType": "text/html"}}}}])
    assert "contentMediaType" in e.value.body["error"]["message"]


def test_forced_tool_use():
    """tool_choice any and tool: a tool_use block whatever the model, input an object; then the tool_result round trip."""
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": {
                 "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
             {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}]
    for choice in ({"type": "any", "disable_parallel_tool_use": True}, {"type": "tool", "name": "get_weather"}):
        m = client().messages.create(model=MODEL, max_tokens=60, messages=MSGS, tools=tools, tool_choice=choice)
        assert m.stop_reason == "tool_use"
        uses = [b for b in m.content if b.type == "tool_use"]
        assert [b.type for b in m.content if b.type != "tool_use"] in ([], ["thinking"])
        assert uses and uses[0].id.startswith("toolu_") and isinstance(uses[0].input, dict)
        if choice["type"] == "tool" or choice.get("disable_parallel_tool_use"):
            assert len(uses) == 1
        if choice["type"] == "tool":
            assert uses[0].name == "get_weather" and isinstance(uses[0].input["city"], str)
        with client().messages.stream(model=MODEL, max_tokens=60, messages=MSGS, tools=tools, tool_choice=choice) as s:
            final = s.get_final_message()
        assert final.stop_reason == "tool_use"
        streamed = [b for b in final.content if b.type == "tool_use"]
        assert streamed and all(isinstance(b.input, dict) for b in streamed)
    messages = MSGS + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": uses[0].id, "name": uses[0].name, "input": uses[0].input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}]},
    ]
    m = client().messages.create(model=MODEL, max_tokens=3, messages=messages, tools=tools)
    assert m.stop_reason in ("max_tokens", "end_turn")


def test_authentication():
    with pytest.raises(anthropic.AuthenticationError) as e:
        client(key="sk-wrong").messages.create(model=MODEL, max_tokens=2, messages=MSGS)
    assert e.value.body["error"]["type"] == "authentication_error"
    # auth_token sends Authorization: Bearer instead of x-api-key.
    bearer = anthropic.Anthropic(base_url=BASE, api_key=None, auth_token=KEY, max_retries=0)
    assert bearer.messages.create(model=MODEL, max_tokens=2, messages=MSGS).usage.output_tokens == 2
    with pytest.raises(anthropic.AuthenticationError) as e:
        anthropic.Anthropic(base_url=BASE, api_key=None, auth_token="sk-wrong", max_retries=0).messages.create(
            model=MODEL, max_tokens=2, messages=MSGS)
    assert e.value.status_code == 401 and e.value.body["error"]["type"] == "authentication_error"


def test_request_too_large():
    with pytest.raises(anthropic.ContentTooLargeError) as e:
        client(base=SMALL, key="unused").messages.create(model=MODEL, max_tokens=2,
                                                         messages=[{"role": "user", "content": "x" * (10 << 10)}])
    assert e.value.status_code == 413
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "request_too_large"


def test_overloaded():
    """The pinned demo model fills the small node's memory budget: the thinker
    cannot be loaded now, 529 overloaded_error, whether streamed or not."""
    c = client(base=SMALL, key="unused")
    with pytest.raises(anthropic.OverloadedError) as e:
        c.messages.create(model=THINKER, max_tokens=2, messages=MSGS)
    assert e.value.status_code == 529 and e.value.response.headers.get("retry-after") == "5"
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "overloaded_error"
    with pytest.raises(anthropic.OverloadedError) as e:
        with c.messages.stream(model=THINKER, max_tokens=2, messages=MSGS) as s:
            s.get_final_message()
    assert e.value.body["error"]["type"] == "overloaded_error"
    assert c.messages.create(model=MODEL, max_tokens=2, messages=MSGS).usage.output_tokens == 2


def test_rate_limit():
    c = client(base=TIGHT, key="unused")
    with c.messages.stream(model=MODEL, max_tokens=4096, messages=MSGS) as s:
        next(iter(s))  # admitted and generating
        with pytest.raises(anthropic.RateLimitError) as e:
            c.messages.create(model=MODEL, max_tokens=2, messages=MSGS)
    assert e.value.response.headers.get("retry-after") == "1"
    assert e.value.body["error"]["type"] == "rate_limit_error"
