"""The official openai Python library against a running fusion node.

Driven by TestPythonSDK (sdk_clients_test.go), which starts the nodes and
sets FUSION_BASE_URL (auth on, key FUSION_API_KEY), FUSION_TIGHT_URL (no
auth, one generation at a time) and FUSION_MODEL.
"""

import asyncio
import json
import os
import time
import urllib.request

import openai
import pytest

BASE = os.environ["FUSION_BASE_URL"]
KEY = os.environ["FUSION_API_KEY"]
TIGHT = os.environ["FUSION_TIGHT_URL"]
MODEL = os.environ["FUSION_MODEL"]
MSGS = [{"role": "user", "content": "Tell me a story"}]


def client(base=BASE, key=KEY):
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0)


def http_json(method, url, body=None, key=KEY):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    with urllib.request.urlopen(req) as r:
        return json.load(r)


@pytest.fixture(scope="module")
def no_eos():
    """logit_bias banning the demo model's end tokens: generation runs to max_tokens."""
    bias = {}
    for s in ("<|im_end|>", "<|endoftext|>"):
        res = http_json("POST", BASE + "/tokenize", {"model": MODEL, "prompt": s, "add_special_tokens": False})
        assert res["count"] == 1
        bias[str(res["tokens"][0])] = -100
    return bias


def test_chat_sync(no_eos):
    r = client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=5, temperature=0, logit_bias=no_eos)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == MODEL
    assert r.system_fingerprint
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and c.message.role == "assistant" and c.finish_reason == "length"
    assert isinstance(c.message.content, str) and c.message.content
    assert r.usage.completion_tokens == 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + 5
    assert r.usage.prompt_tokens_details.cached_tokens == 0
    again = client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=5, temperature=0, logit_bias=no_eos)
    assert again.choices[0].message.content == c.message.content


def test_chat_with_raw_response(no_eos):
    raw = client().chat.completions.with_raw_response.create(
        model=MODEL, messages=MSGS, max_completion_tokens=3, logit_bias=no_eos, seed=3, temperature=0.8
    )
    assert raw.status_code == 200
    assert raw.headers.get("x-request-id")
    assert raw.headers.get("content-type", "").startswith("application/json")
    r = raw.parse()
    assert r.usage.completion_tokens == 3
    body = json.loads(raw.text)
    assert body["usage"]["cached_tokens"] == 0
    assert body["choices"][0]["message"]["tool_calls"] is None


def test_chat_with_tools(no_eos):
    """tools with tool_choice auto, and a tool round trip in the history, are accepted and answered."""
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    messages = MSGS + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    r = client().chat.completions.create(model=MODEL, messages=messages, tools=tools, tool_choice="auto",
                                         parallel_tool_calls=True, max_tokens=3, logit_bias=no_eos)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3
    chunks = list(client().chat.completions.create(model=MODEL, messages=messages, tools=tools, tool_choice="auto",
                                                   max_tokens=3, logit_bias=no_eos, stream=True))
    assert chunks[-1].choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError) as e:
        client().chat.completions.create(model=MODEL, messages=MSGS, tools=tools,
                                         tool_choice={"type": "function", "function": {"name": "nope"}}, max_tokens=3)
    assert e.value.code == "invalid_value"


def test_forced_tool_calls():
    """tool_choice required and named: real tool calls whatever the model, streamed and not, then a round trip."""
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}},
             {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        for seed in range(2):
            r = client().chat.completions.create(model=MODEL, messages=MSGS, tools=tools, tool_choice=choice,
                                                 parallel_tool_calls=False, max_tokens=60, seed=seed)
            assert r.choices[0].finish_reason == "tool_calls"
            calls = r.choices[0].message.tool_calls
            assert len(calls) == 1 and calls[0].id and calls[0].type == "function"
            assert calls[0].function.name in ("get_weather", "get_time")
            if choice != "required":
                assert calls[0].function.name == "get_weather"
            args = json.loads(calls[0].function.arguments)
            assert isinstance(args, dict)
            if calls[0].function.name == "get_weather":
                assert isinstance(args["city"], str)
            chunks = list(client().chat.completions.create(model=MODEL, messages=MSGS, tools=tools, tool_choice=choice,
                                                           parallel_tool_calls=False, max_tokens=60, seed=seed,
                                                           stream=True))
            assert chunks[-1].choices[0].finish_reason == "tool_calls"
            deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
            assert deltas[0].id and deltas[0].function.name == calls[0].function.name
            assert json.loads("".join(d.function.arguments or "" for d in deltas)) == args
    messages = MSGS + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": calls[0].id, "type": "function",
             "function": {"name": calls[0].function.name, "arguments": calls[0].function.arguments}}]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny"},
    ]
    r = client().chat.completions.create(model=MODEL, messages=messages, tools=tools, max_tokens=5, tool_choice="none")
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason in ("length", "stop")


def test_tool_round_trip(no_eos):
    """call → tool message → answer, with the model's own forced call in the
    history: the answer is asked for non-streaming and streaming (raw chunks
    and the SDK's stream helper) and assembles into the same assistant text,
    with no tool calls under tool_choice none."""
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}}]
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    r = client().chat.completions.create(model=MODEL, messages=ask, tools=tools, max_tokens=60, seed=3,
                                         tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert r.choices[0].finish_reason == "tool_calls"
    call = r.choices[0].message.tool_calls[0]
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    history = ask + [
        r.choices[0].message.model_dump(exclude_none=True),  # the assistant turn as the SDK returned it
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
    ]
    assert history[1]["tool_calls"][0]["id"] == call.id

    # The call and its result are rendered into the prompt.
    rendered = http_json("POST", BASE + "/tokenize", {"model": MODEL, "messages": history, "tools": tools})
    text = http_json("POST", BASE + "/detokenize", {"model": MODEL, "tokens": rendered["tokens"]})["prompt"]
    args = json.dumps(json.loads(call.function.arguments), ensure_ascii=False)  # the template's tojson spacing
    assert '{"name": "get_weather", "arguments": ' + args + "}" in text and "sunny, 21 C" in text, text

    params = dict(model=MODEL, messages=history, tools=tools, tool_choice="none", max_tokens=8, temperature=0,
                  logit_bias=no_eos)
    r = client().chat.completions.create(**params)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 8
    # tool_choice none does not show the tools, only the conversation.
    assert r.usage.prompt_tokens == http_json("POST", BASE + "/tokenize", {"model": MODEL, "messages": history})["count"]
    assert msg.role == "assistant" and msg.tool_calls is None and msg.content

    chunks = list(client().chat.completions.create(**params, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(not c.choices[0].delta.tool_calls for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == msg.content

    # The SDK's stream helper assembles the same message; at the length
    # limit it raises, carrying the completion.
    with client().chat.completions.stream(**params) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        with pytest.raises(openai.LengthFinishReasonError) as cut:
            stream.get_final_completion()
    assert "".join(deltas) == msg.content
    final = cut.value.completion
    assert final.choices[0].finish_reason == "length" and final.choices[0].message.role == "assistant"
    assert final.choices[0].message.content == msg.content and not final.choices[0].message.tool_calls

    # tool_choice auto after the result: an answer (text or a new call),
    # streamed the same as not.
    auto = dict(params, tool_choice="auto", max_tokens=60, temperature=1, seed=5)
    del auto["logit_bias"]
    r = client().chat.completions.create(**auto)
    assert r.usage.prompt_tokens == rendered["count"]
    chunks = list(client().chat.completions.create(**auto, stream=True))
    assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (r.choices[0].message.content or "")
    streamed_calls = [tc.function.name for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or []) if tc.function.name]
    assert streamed_calls == [tc.function.name for tc in (r.choices[0].message.tool_calls or [])]


def test_chat_stream_with_usage(no_eos):
    stream = client().chat.completions.create(
        model=MODEL, messages=MSGS, max_tokens=6, temperature=0, logit_bias=no_eos,
        stream=True, stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].object == "chat.completion.chunk"
    assert {c.id for c in chunks} == {chunks[0].id}
    finish = chunks[-2]
    assert finish.choices[0].finish_reason == "length"
    assert finish.usage is None
    last = chunks[-1]
    assert last.choices == []
    assert last.usage.completion_tokens == 6
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    r = client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=6, temperature=0, logit_bias=no_eos)
    assert text == r.choices[0].message.content


def test_async_and_concurrent(no_eos):
    async def main():
        ac = openai.AsyncOpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0)
        rs = await asyncio.gather(*[
            ac.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=4, temperature=0, logit_bias=no_eos)
            for _ in range(4)
        ])
        assert len({r.choices[0].message.content for r in rs}) == 1
        stream = await ac.chat.completions.create(
            model=MODEL, messages=MSGS, max_tokens=4, temperature=0, logit_bias=no_eos, stream=True, n=2
        )
        seen = {}
        async for chunk in stream:
            for ch in chunk.choices:
                seen.setdefault(ch.index, []).append(ch)
        assert sorted(seen) == [0, 1]
        assert all(chs[-1].finish_reason == "length" for chs in seen.values())
        models = await ac.models.list()
        assert [m.id for m in models.data] == [MODEL]
        await ac.close()

    asyncio.run(main())


def test_completions(no_eos):
    r = client().completions.create(model=MODEL, prompt=["Once upon", "def main"], max_tokens=3,
                                    temperature=0, echo=True, logit_bias=no_eos)
    assert r.object == "text_completion"
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].text.startswith("Once upon")
    assert r.choices[1].text.startswith("def main")
    assert r.usage.completion_tokens == 6
    lp = client().completions.create(model=MODEL, prompt="Hello", max_tokens=3, logprobs=2, logit_bias=no_eos)
    lps = lp.choices[0].logprobs
    assert len(lps.tokens) == len(lps.token_logprobs) == len(lps.top_logprobs) == len(lps.text_offset) == 3
    assert "".join(lps.tokens) == lp.choices[0].text
    stream = client().completions.create(model=MODEL, prompt="Hello", max_tokens=3, stream=True,
                                         stream_options={"include_usage": True}, logit_bias=no_eos)
    chunks = list(stream)
    assert chunks[-1].usage.completion_tokens == 3 and chunks[-1].choices == []
    assert chunks[-2].choices[0].finish_reason == "length"


def test_models():
    c = client()
    ids = [m.id for m in c.models.list()]
    assert ids == [MODEL]
    m = c.models.retrieve(MODEL)
    assert m.id == MODEL and m.object == "model" and m.owned_by
    with pytest.raises(openai.NotFoundError) as e:
        c.models.retrieve("no-such-model")
    assert e.value.code == "model_not_found"


def test_tokenize_round_trip():
    t = http_json("POST", BASE + "/tokenize", {"model": MODEL, "prompt": "Hello, world"})
    assert t["count"] == len(t["tokens"]) > 0
    d = http_json("POST", BASE + "/detokenize", {"model": MODEL, "tokens": t["tokens"]})
    assert d == {"prompt": "Hello, world"}
    m = http_json("POST", BASE + "/tokenize", {"model": MODEL, "messages": MSGS})
    assert "<|im_start|>user\nTell me a story<|im_end|>" in m["prompt"]


def test_errors(no_eos):
    with pytest.raises(openai.NotFoundError) as e:
        client().chat.completions.create(model="nope", messages=MSGS)
    assert e.value.status_code == 404 and e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client().chat.completions.create(model=MODEL, messages=MSGS, temperature=5)
    assert e.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client().chat.completions.create(model=MODEL, messages=MSGS, extra_body={"top_k": "many"})
    assert e.value.param == "top_k" and e.value.code == "invalid_type"
    with pytest.raises(openai.BadRequestError) as e:
        client().chat.completions.create(model=MODEL, messages="hello")
    assert e.value.param == "messages"
    with pytest.raises(openai.AuthenticationError) as e:
        client(key="sk-wrong").chat.completions.create(model=MODEL, messages=MSGS)
    assert e.value.code == "invalid_api_key"
    with pytest.raises(openai.RateLimitError) as e:
        # n=2 on a node admitting one generation: the second is refused
        # while the first runs (no end token, many tokens: it cannot finish first).
        client(base=TIGHT, key="unused").chat.completions.create(
            model=MODEL, messages=MSGS, n=2, max_tokens=4000, logit_bias=no_eos)
    assert e.value.response.headers.get("retry-after") == "1"


def test_cancel_mid_stream(no_eos):
    before = http_json("GET", BASE + "/metrics")
    stream = client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=4096,
                                              logit_bias=no_eos, stream=True)
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()
    deadline = time.time() + 10
    while True:
        m = http_json("GET", BASE + "/metrics")
        if (m["cancelled_requests"] == before["cancelled_requests"] + 1 and m["engine"]["in_flight"] == 0
                and m["active_requests"] == 0):
            break
        assert time.time() < deadline, m
        time.sleep(0.01)
    assert m["engine"]["cancelled"] == before["engine"]["cancelled"] + 1


def test_parse_structured_output():
    """client.chat.completions.parse with a Pydantic model: the random-weight
    demo model's answer is constrained to the model's JSON schema."""
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: int
        member: bool

    for seed in range(3):
        r = client().chat.completions.parse(
            model=MODEL, messages=MSGS, response_format=Person, max_tokens=3000, temperature=1, seed=seed)
        assert r.choices[0].finish_reason == "stop"
        person = r.choices[0].message.parsed
        assert isinstance(person, Person)


def test_stream_structured_output():
    """client.beta.chat.completions.stream with a Pydantic model."""
    from pydantic import BaseModel

    class Point(BaseModel):
        x: int
        y: int

    with client().beta.chat.completions.stream(
            model=MODEL, messages=MSGS, response_format=Point, max_tokens=500, temperature=1, seed=4) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    assert isinstance(final.choices[0].message.parsed, Point)


def reasoning_of(message):
    """The reasoning the node sends beside the content (reasoning_content, and its reasoning alias)."""
    extra = message.model_extra or {}
    assert extra.get("reasoning_content") == extra.get("reasoning")
    return extra.get("reasoning_content")


def test_reasoning_effort(no_eos):
    """reasoning_effort starts the demo model (a Qwen3 hybrid template) in thinking mode: the reasoning
    comes apart from the content, bounded by the effort's share of max_tokens, then the answer follows."""
    seen = {}
    for effort in ("low", "high"):
        r = client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=40, temperature=0,
                                             logit_bias=no_eos, reasoning_effort=effort)
        c = r.choices[0]
        reasoning = reasoning_of(c.message)
        assert reasoning and reasoning.strip(), effort
        assert "<think>" not in (c.message.content or "") and "</think>" not in reasoning
        assert c.message.content, effort  # the budget closed the block; the answer came after it
        assert r.usage.completion_tokens == 40
        seen[effort] = reasoning
    # Greedy, so both start alike; low's budget (8 of 40 tokens) ends its reasoning before high's (32).
    assert seen["high"].startswith(seen["low"]) and len(seen["high"]) > len(seen["low"]), seen
    # Streamed: reasoning deltas first, then content.
    kinds = []
    for chunk in client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=20, temperature=0,
                                                  logit_bias=no_eos, reasoning_effort="medium", stream=True):
        for ch in chunk.choices:
            extra = ch.delta.model_extra or {}
            if extra.get("reasoning_content"):
                kinds.append("r")
            if ch.delta.content:
                kinds.append("c")
    assert kinds and kinds[0] == "r" and "c" in kinds and "r" not in kinds[kinds.index("c"):], kinds
    # none: no thinking at all.
    r = client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=10, temperature=0,
                                         logit_bias=no_eos, reasoning_effort="none")
    assert not reasoning_of(r.choices[0].message) and r.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as e:
        client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=3, reasoning_effort="extreme")
    assert e.value.param == "reasoning_effort" and e.value.code == "invalid_value"
    with pytest.raises(openai.BadRequestError) as e:
        client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=3, reasoning_effort="low",
                                         extra_body={"enable_thinking": False})
    assert e.value.param == "reasoning_effort"


def test_chat_template_kwargs_enable_thinking(no_eos):
    """chat_template_kwargs.enable_thinking (vLLM's way) true: the answer starts in reasoning; false: none."""
    r = client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=12, temperature=0, logit_bias=no_eos,
                                         extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    assert reasoning_of(r.choices[0].message)
    r = client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=12, temperature=0, logit_bias=no_eos,
                                         extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert not reasoning_of(r.choices[0].message) and r.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as e:
        client().chat.completions.create(model=MODEL, messages=MSGS, max_tokens=3,
                                         extra_body={"chat_template_kwargs": {"enable_thinking": "yes"}})
    assert e.value.param == "chat_template_kwargs.enable_thinking" and e.value.code == "invalid_type"
