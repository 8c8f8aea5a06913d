"""The official OpenAI and Anthropic Python SDKs against a gpt_oss demo model
served in gpt-oss's harmony format (sdk_harmony_test.go).

FUSION_BASE_URL is a node holding the model, FUSION_FORWARD_URL a node of
the same cluster without it (it forwards); FUSION_API_KEY and FUSION_MODEL
as in test_openai_python.py. Every test runs through both.

The model has random weights: what it writes freely is noise, so these
tests check what the server guarantees whatever the model prefers — the
harmony prompt, the markers never reaching the client, the analysis
channel split into reasoning_content and bounded by reasoning_effort, tool
calls forced through the grammar, structured output, reasoning opened by
thinking — and that streamed and whole answers agree.
"""

import json
import os

import anthropic
import pytest

from conftest import ANSWER, MSGS, TOOLS, ant, ant_message, anthropic_tools, ban, chat_both, check_answer, http_json, node_urls, oai, \
    reasoning_of
from conftest import no_markers as no_markers_in

MODEL = os.environ["FUSION_MODEL"]
URLS = node_urls()
MARKERS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"]
ENDS = ["<|return|>", "<|call|>", "<|endoftext|>"]
# The tokens that end a message body: <|end|>, and the markers a body
# cannot hold, which start the next message's header.
BODY_ENDS = ["<|end|>", "<|start|>", "<|channel|>"]


def no_markers(*texts):
    """No marker, and no header's role or channel name leaked as text."""
    no_markers_in(MARKERS, *texts)
    for t in texts:
        if t:
            assert not t.lstrip().startswith(("assistant", "analysis", "final", "commentary")), t


@pytest.fixture(scope="module")
def no_end():
    """logit_bias banning the model's end tokens: generation runs to max_tokens."""
    return ban(MODEL, ENDS)


@pytest.mark.parametrize("base", URLS)
def test_prompt_is_harmony(base):
    res = http_json(base + "/tokenize", {"model": MODEL, "messages": MSGS, "tools": TOOLS})
    p = res["prompt"]
    assert p.startswith("<|start|>system<|message|>You are ChatGPT")
    assert "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {" in p
    assert p.endswith("<|start|>user<|message|>What is the weather in Paris?<|end|><|start|>assistant")


@pytest.mark.parametrize("base", URLS)
def test_chat_stream_and_not_agree(base, no_end):
    r, content, streamed_reasoning, last = chat_both(oai(base), MODEL, messages=MSGS, max_tokens=12, temperature=0, logit_bias=no_end)
    ch = r.choices[0]
    assert ch.finish_reason == "length" and r.usage.completion_tokens == 12
    reasoning = reasoning_of(ch.message)
    no_markers(ch.message.content, reasoning)
    assert last == "length"
    assert content == (ch.message.content or "")
    assert streamed_reasoning == (reasoning or "")


@pytest.mark.parametrize("base", URLS)
def test_reasoning_split(base, no_end):
    """test_family_sdk.py's reasoning split, for harmony. enable_thinking
    opens the analysis message, whose body comes back as reasoning_content
    (the tokens that end a body banned, all of the answer is reasoning);
    reasoning_effort bounds it: once the effort's share of max_tokens is
    spent the runner writes <|end|>, and what the model writes after it
    comes back as content."""
    c = oai(base)
    r, content, reasoning, last = chat_both(c, MODEL, messages=MSGS, max_tokens=12, temperature=0,
                                            logit_bias=ban(MODEL, ENDS + BODY_ENDS), extra_body={"enable_thinking": True})
    ch = r.choices[0]
    assert ch.finish_reason == "length" and last == "length" and r.usage.completion_tokens == 12
    assert reasoning_of(ch.message) and not ch.message.content
    assert reasoning == reasoning_of(ch.message) and content == ""
    no_markers(reasoning)
    # "low" spends a fifth of max_tokens on reasoning: 4 of 20.
    r, content, reasoning, last = chat_both(c, MODEL, messages=MSGS, max_tokens=20, temperature=0, logit_bias=no_end,
                                            reasoning_effort="low", logprobs=True)
    ch = r.choices[0]
    assert ch.finish_reason == "length" and last == "length" and r.usage.completion_tokens == 20
    assert reasoning_of(ch.message) and ch.message.content
    assert reasoning == reasoning_of(ch.message) and content == ch.message.content
    no_markers(reasoning, content)
    # The tokens: the analysis body, <|end|> within the budget, then the
    # content (the random model writes no header: its text is content).
    toks = ch.logprobs.content
    closed = [t.token for t in toks].index("<|end|>")
    assert 1 <= closed <= 4, [t.token for t in toks]
    text = lambda ts: bytes(b for t in ts for b in t.bytes).decode()
    assert text(toks[:closed]) == reasoning and text(toks[closed + 1:]) == content


@pytest.mark.parametrize("base", URLS)
def test_forced_tool_calls(base):
    c = oai(base)
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        for seed in range(1):
            r = c.chat.completions.create(model=MODEL, messages=MSGS, tools=TOOLS, tool_choice=choice,
                                          max_tokens=60, seed=seed, temperature=1)
            ch = r.choices[0]
            assert ch.finish_reason == "tool_calls"
            calls = ch.message.tool_calls
            assert len(calls) == 1 and calls[0].id and calls[0].type == "function"
            name = calls[0].function.name
            assert name in ("get_weather", "get_time")
            if choice != "required":
                assert name == "get_weather"
            args = json.loads(calls[0].function.arguments)
            assert isinstance(args, dict)
            if name == "get_weather":
                assert isinstance(args["city"], str) and len(args["city"]) <= 12
            no_markers(ch.message.content)
            chunks = list(c.chat.completions.create(model=MODEL, messages=MSGS, tools=TOOLS, tool_choice=choice,
                                                    max_tokens=60, seed=seed, temperature=1, stream=True))
            assert chunks[-1].choices[0].finish_reason == "tool_calls"
            deltas = [tc for k in chunks if k.choices for tc in (k.choices[0].delta.tool_calls or [])]
            assert deltas[0].id and deltas[0].function.name == name
            assert json.loads("".join(d.function.arguments or "" for d in deltas)) == args
    # The call and its result go back in the history, rendered as harmony.
    history = MSGS + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": calls[0].id, "type": "function", "function": {"name": name, "arguments": calls[0].function.arguments}}]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny"},
    ]
    p = http_json(base + "/tokenize", {"model": MODEL, "messages": history, "tools": TOOLS})["prompt"]
    assert ("<|start|>assistant to=functions." + name + "<|channel|>commentary json<|message|>") in p
    assert p.endswith("<|start|>functions." + name + " to=assistant<|channel|>commentary<|message|>sunny<|end|><|start|>assistant")
    r = c.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=5, tool_choice="none")
    assert r.choices[0].message.tool_calls is None


@pytest.mark.parametrize("base", URLS)
def test_structured_output(base):
    for seed in range(1):
        r = oai(base).chat.completions.create(
            model=MODEL, messages=MSGS, max_tokens=40, seed=seed, temperature=1,
            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER, "strict": True}})
        check_answer(r.choices[0].message.content)


@pytest.mark.parametrize("base", URLS)
def test_anthropic_structured_output(base):
    """output_config.format: the final message is JSON valid against the
    schema, whole and streamed; with thinking enabled the analysis message
    comes first, as a thinking block (the budget closes it), then the
    JSON (through the forwarding member only: 1024 tokens of reasoning).
    A schema the grammar cannot enforce is a 400."""
    a = ant(base)
    user = [{"role": "user", "content": "Answer in JSON."}]
    fmt = {"format": {"type": "json_schema", "schema": ANSWER}}
    for stream in (False, True):
        m = ant_message(a, stream, model=MODEL, max_tokens=60, messages=user, output_config=fmt)
        assert [b.type for b in m.content] == ["text"] and m.stop_reason == "end_turn", m
        check_answer(m.content[0].text)
        no_markers(m.content[0].text)
    with pytest.raises(anthropic.BadRequestError) as e:
        a.messages.create(model=MODEL, max_tokens=20, messages=user,
                          output_config={"format": {"type": "json_schema", "schema": {"$ref": "https://example.com/s.json"}}})
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert e.value.body["error"]["message"].startswith('output_config.format.schema: the schema keyword "$ref"')
    if base != URLS[1]:
        return  # the thinking answer (1024 tokens of reasoning) once, through the forwarding member
    m = ant_message(a, True, model=MODEL, max_tokens=1100, messages=user, output_config=fmt,
                    thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in m.content] == ["thinking", "text"] and m.stop_reason == "end_turn", m
    assert m.content[0].thinking and m.content[0].signature
    no_markers(m.content[0].thinking, m.content[1].text)
    check_answer(m.content[1].text)


@pytest.mark.parametrize("base", URLS)
def test_anthropic_tool_use_and_thinking(base):
    a = ant(base)
    tools = anthropic_tools(TOOLS)
    m = a.messages.create(model=MODEL, max_tokens=60, messages=[{"role": "user", "content": "Weather in Paris?"}],
                          tools=tools, tool_choice={"type": "tool", "name": "get_weather"})
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather" and isinstance(uses[0].input["city"], str)
    with a.messages.stream(model=MODEL, max_tokens=60, messages=[{"role": "user", "content": "Weather in Paris?"}],
                           tools=tools, tool_choice={"type": "any"}) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and [b.type for b in final.content if b.type == "tool_use"] == ["tool_use"]
    # Thinking enabled: the answer starts in the analysis channel, which
    # comes back as a thinking block. (The stream is closed at its first
    # thinking text, which cancels the rest: a budget is at least 1024.)
    first, thinking = None, ""
    with a.messages.stream(model=MODEL, max_tokens=1030, messages=[{"role": "user", "content": "Think, then answer."}],
                           thinking={"type": "enabled", "budget_tokens": 1024}) as s:
        for ev in s:
            if ev.type == "content_block_start" and first is None:
                first = ev.content_block.type
            if ev.type == "content_block_delta" and ev.delta.type == "thinking_delta" and ev.delta.thinking:
                thinking = ev.delta.thinking
                break
    assert first == "thinking" and thinking
    no_markers(thinking)
