"""The official OpenAI and Anthropic Python SDKs against demo models of
several chat families (sdk_families_test.go).

FUSION_MODELS is "family=model,..." with family a key of FAMILIES;
FUSION_BASE_URL is a node holding the models, FUSION_FORWARD_URL a node
of the same cluster without them (it forwards); FUSION_API_KEY as in
test_openai_python.py. Every test runs for every model through both.

The models have random weights: what they write freely is noise, so these
tests check what the server guarantees whatever the model prefers — the
family's prompt, its markers never reaching the client, tool calls forced
through the grammar that parse and validate, structured output, the
reasoning split where the family has one (and its absence, with the
content whole, where it has none) — and that streamed and whole answers
agree.
"""

import json
import os

import anthropic
import openai
import pytest

from conftest import ANSWER, MSGS, TOOLS, ant, ant_message, anthropic_tools, chat_both, check_answer, http_json, node_urls, oai, \
    reasoning_of
from conftest import ban as ban_tokens
from conftest import no_markers as no_markers_in

URLS = node_urls()
MODELS = dict(p.split("=", 1) for p in os.environ["FUSION_MODELS"].split(","))

# What each family's template and format look like.
#   prompt: the rendered MSGS with the generation prompt.
#   ends: the tokens that end an answer (banned to run to max_tokens).
#   think: the reasoning block's tokens, or None where the family has none.
#   markers: control text that must never reach the client.
FAMILIES = {
    "gemma3": {
        "prompt": "<bos><start_of_turn>user\nBe brief.\n\nWhat is the weather in Paris?<end_of_turn>\n<start_of_turn>model\n",
        "ends": ["<end_of_turn>", "<eos>"],
        "think": None,
        "markers": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"],
        # The template knows no tool messages: a history with calls and
        # results is the template's error, a 400.
        "tool_history": None,
    },
    "qwen3_5": {
        # Qwen3.5's template thinks unless enable_thinking is false: the
        # prompt opens the block.
        "prompt": ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\n"),
        "ends": ["<|im_end|>", "<|endoftext|>"],
        "think": ("<think>", "</think>"),
        "markers": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
                    "<function=", "<parameter="],
        # How a call (name, arguments JSON) and its result "sunny" read in
        # the history: a parameter per argument, a string as it is.
        "tool_history": lambda name, args: ("<tool_call>\n<function=%s>\n%s</function>\n</tool_call><|im_end|>\n" % (name, "".join(
            "<parameter=%s>\n%s\n</parameter>\n" % (k, v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
            for k, v in json.loads(args).items())),
            "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"),
    },
    "gemma4": {
        # Thinking off (the template's default) closes an empty thought channel.
        "prompt": ("<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nWhat is the weather in Paris?<turn|>\n"
                   "<|turn>model\n<|channel>thought\n<channel|>"),
        "ends": ["<turn|>", "<eos>"],
        "think": ("<|channel>", "<channel|>"),
        # enable_thinking leaves the channel to the model (Anthropic's
        # thinking opens it in the prompt).
        "model_opens_think": True,
        "tools_listed": ["<|tool>declaration:get_weather{", "<|tool>declaration:get_time{"],
        "markers": ["<bos>", "<eos>", "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>'],
        "tool_history": lambda name, args: ("<|tool_call>call:%s%s<tool_call|>" % (name, gemma_notation(json.loads(args))),
                                            '<|tool_response>response:%s{value:<|"|>sunny<|"|>}<tool_response|>' % name),
    },
}
CASES = [(base, fam) for fam in MODELS for base in URLS]


def gemma_notation(v):
    """A JSON value as Gemma 4's template writes call arguments."""
    if isinstance(v, str):
        return '<|"|>' + v + '<|"|>'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{" + ",".join(k + ":" + gemma_notation(v[k]) for k in sorted(v, key=str.lower)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(gemma_notation(x) for x in v) + "]"
    return "None" if v is None else str(v)
IDS = [f"{fam}-{'node' if base == URLS[0] else 'forward'}" for base, fam in CASES]


def no_markers(fam, *texts):
    no_markers_in(FAMILIES[fam]["markers"], *texts)


def ban(fam, *extra):
    """logit_bias banning the family's end tokens (and extra ones): generation runs to max_tokens."""
    return ban_tokens(MODELS[fam], FAMILIES[fam]["ends"] + list(extra))


@pytest.mark.parametrize("base,fam", CASES, ids=IDS)
def test_prompt_is_the_family_template(base, fam):
    assert http_json(base + "/tokenize", {"model": MODELS[fam], "messages": MSGS})["prompt"] == FAMILIES[fam]["prompt"]
    # With tools: a template with a tool format lists them; Gemma 3's
    # ignores them (a forced call is then only the grammar's doing).
    p = http_json(base + "/tokenize", {"model": MODELS[fam], "messages": MSGS, "tools": TOOLS})["prompt"]
    if FAMILIES[fam]["tool_history"] is None:
        assert p == FAMILIES[fam]["prompt"]
    else:
        for listed in FAMILIES[fam].get("tools_listed", ['"name": "get_weather"', '"maxLength": 12']):
            assert listed in p, (listed, p)


@pytest.mark.parametrize("base,fam", CASES, ids=IDS)
def test_chat_stream_and_not_agree(base, fam):
    r, content, reasoning, last = chat_both(oai(base), MODELS[fam], messages=MSGS, max_tokens=12, temperature=0, logit_bias=ban(fam))
    ch = r.choices[0]
    assert ch.finish_reason == "length" and r.usage.completion_tokens == 12
    no_markers(fam, ch.message.content, reasoning_of(ch.message))
    assert last == "length"
    assert content == (ch.message.content or "")
    assert reasoning == (reasoning_of(ch.message) or "")


@pytest.mark.parametrize("base,fam", CASES, ids=IDS)
def test_reasoning_split(base, fam):
    """enable_thinking: a family with a reasoning block answers in it (the
    block's end banned, so all of the answer is reasoning); one without
    has no split: no reasoning, and the content is whole — the very answer
    it gives without the flag."""
    think = FAMILIES[fam]["think"]
    c = oai(base)
    kw = dict(messages=MSGS, max_tokens=12, temperature=0)
    if think is None:
        plain = c.chat.completions.create(model=MODELS[fam], logit_bias=ban(fam), **kw).choices[0].message
        r, content, reasoning, last = chat_both(c, MODELS[fam], logit_bias=ban(fam), extra_body={"enable_thinking": True}, **kw)
        msg = r.choices[0].message
        assert reasoning_of(msg) is None and reasoning == ""
        assert msg.content and msg.content == plain.content == content
        return
    if FAMILIES[fam].get("model_opens_think"):
        # The template opens no channel: enable_thinking turns thinking on
        # in the system turn and takes the closed empty channel out of the
        # prompt; the model chooses (the runner's tests make it think and
        # check the budget).
        p = http_json(base + "/tokenize", {"model": MODELS[fam], "messages": MSGS, "enable_thinking": True})["prompt"]
        want = FAMILIES[fam]["prompt"][:-len(think[0] + "thought\n" + think[1])]
        assert p == want.replace("<|turn>system\n", "<|turn>system\n<|think|>\n", 1)
        return
    r, content, reasoning, last = chat_both(c, MODELS[fam], logit_bias=ban(fam, think[1]), extra_body={"enable_thinking": True}, **kw)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "length" and last == "length"
    assert reasoning_of(msg) and not msg.content
    assert reasoning == reasoning_of(msg) and content == ""
    no_markers(fam, reasoning_of(msg))
    # reasoning_effort bounds the block: the runner closes it and the
    # answer follows in content.
    r = c.chat.completions.create(model=MODELS[fam], messages=MSGS, max_tokens=20, temperature=0, logit_bias=ban(fam),
                                  reasoning_effort="low")
    msg = r.choices[0].message
    assert reasoning_of(msg) and msg.content
    no_markers(fam, reasoning_of(msg), msg.content)


@pytest.mark.parametrize("base,fam", CASES, ids=IDS)
def test_forced_tool_calls(base, fam):
    c = oai(base)
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        r = c.chat.completions.create(model=MODELS[fam], messages=MSGS, tools=TOOLS, tool_choice=choice,
                                      max_tokens=60, seed=0, temperature=1)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls"
        calls = ch.message.tool_calls
        assert len(calls) >= 1 and all(k.id and k.type == "function" for k in calls)
        for k in calls:
            assert k.function.name in ("get_weather", "get_time")
            if choice != "required":
                assert k.function.name == "get_weather"
            args = json.loads(k.function.arguments)
            assert isinstance(args, dict)
            if k.function.name == "get_weather":
                assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 12
            else:
                assert args == {}
        no_markers(fam, ch.message.content)
        chunks = list(c.chat.completions.create(model=MODELS[fam], messages=MSGS, tools=TOOLS, tool_choice=choice,
                                                max_tokens=60, seed=0, temperature=1, stream=True))
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        deltas = [tc for k in chunks if k.choices for tc in (k.choices[0].delta.tool_calls or [])]
        streamed = {}
        for d in deltas:
            s = streamed.setdefault(d.index, {"id": d.id, "name": d.function.name, "arguments": ""})
            s["arguments"] += d.function.arguments or ""
        assert [(s["name"], json.loads(s["arguments"])) for _, s in sorted(streamed.items())] == \
            [(k.function.name, json.loads(k.function.arguments)) for k in calls]
        assert all(s["id"] for s in streamed.values())
    # The call and its result go back in the history, in the family's
    # format, and the model answers.
    k = calls[0]
    history = MSGS + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": k.id, "type": "function", "function": {"name": k.function.name, "arguments": k.function.arguments}}]},
        {"role": "tool", "tool_call_id": k.id, "content": "sunny"},
    ]
    render = FAMILIES[fam]["tool_history"]
    if render is None:
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(model=MODELS[fam], messages=history, tools=TOOLS, max_tokens=5, tool_choice="none")
        return
    call, result = render(k.function.name, json.dumps(json.loads(k.function.arguments), ensure_ascii=False))
    p = http_json(base + "/tokenize", {"model": MODELS[fam], "messages": history, "tools": TOOLS})["prompt"]
    assert call in p and p.endswith(result)
    r = c.chat.completions.create(model=MODELS[fam], messages=history, tools=TOOLS, max_tokens=5, tool_choice="none")
    assert r.choices[0].message.tool_calls is None


@pytest.mark.parametrize("base,fam", CASES, ids=IDS)
def test_structured_output(base, fam):
    for stream in (False, True):
        kw = dict(model=MODELS[fam], messages=MSGS, max_tokens=40, seed=0, temperature=1,
                  response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER, "strict": True}})
        if stream:
            text = "".join(k.choices[0].delta.content or "" for k in oai(base).chat.completions.create(stream=True, **kw) if k.choices)
        else:
            text = oai(base).chat.completions.create(**kw).choices[0].message.content
        check_answer(text)


@pytest.mark.parametrize("base,fam", CASES, ids=IDS)
def test_anthropic_structured_output(base, fam):
    """output_config.format: the text block is JSON valid against the
    schema, whole and streamed; with thinking enabled a family with a
    reasoning block answers in a thinking block first (the budget closes
    it), then the JSON (through the forwarding member only: 1024 tokens of
    reasoning). A bad format or a schema the grammar cannot enforce is a
    400."""
    a = ant(base)
    user = [{"role": "user", "content": "Answer in JSON."}]
    fmt = {"format": {"type": "json_schema", "schema": ANSWER}}
    for stream in (False, True):
        m = ant_message(a, stream, model=MODELS[fam], max_tokens=60, messages=user, output_config=fmt, thinking={"type": "disabled"})
        assert [b.type for b in m.content] == ["text"] and m.stop_reason == "end_turn", m
        check_answer(m.content[0].text)
        no_markers(fam, m.content[0].text)
    for bad in ({"format": {"type": "json_object"}}, {"format": {"type": "json_schema"}},
                {"format": {"type": "json_schema", "schema": {"type": "string", "contentMediaType": "text/html"}}}):
        with pytest.raises(anthropic.BadRequestError) as e:
            a.messages.create(model=MODELS[fam], max_tokens=20, messages=user, output_config=bad)
        assert e.value.body["error"]["type"] == "invalid_request_error" and "output_config.format" in e.value.body["error"]["message"]
    if base != URLS[1]:
        return  # the thinking answer (1024 tokens of reasoning) once, through the forwarding member
    m = ant_message(a, True, model=MODELS[fam], max_tokens=1100, messages=user, output_config=fmt,
                    thinking={"type": "enabled", "budget_tokens": 1024})
    kinds = [b.type for b in m.content]
    assert kinds == (["thinking", "text"] if FAMILIES[fam]["think"] else ["text"]) and m.stop_reason == "end_turn", m
    if FAMILIES[fam]["think"]:
        assert m.content[0].thinking and m.content[0].signature
        no_markers(fam, m.content[0].thinking)
    check_answer(m.content[-1].text)


@pytest.mark.parametrize("base,fam", CASES, ids=IDS)
def test_anthropic_tool_use_and_thinking(base, fam):
    a = ant(base)
    tools = anthropic_tools(TOOLS)
    user = [{"role": "user", "content": "Weather in Paris?"}]
    m = a.messages.create(model=MODELS[fam], max_tokens=60, messages=user, tools=tools,
                          tool_choice={"type": "tool", "name": "get_weather"})
    assert m.stop_reason == "tool_use"
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) >= 1 and all(u.name == "get_weather" and u.id for u in uses)
    assert all(set(u.input) == {"city"} and isinstance(u.input["city"], str) for u in uses)
    with a.messages.stream(model=MODELS[fam], max_tokens=60, messages=user, tools=tools, tool_choice={"type": "any"}) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [b.name for b in final.content if b.type == "tool_use"] and \
        all(b.name in ("get_weather", "get_time") for b in final.content if b.type == "tool_use")
    # Thinking enabled: a family with a reasoning block starts the answer
    # in it (a thinking block); one without answers in text only. The
    # stream is closed early, which cancels the rest (a budget is at
    # least 1024).
    kinds, thinking, text = [], "", ""
    with a.messages.stream(model=MODELS[fam], max_tokens=1030, messages=[{"role": "user", "content": "Think, then answer."}],
                           thinking={"type": "enabled", "budget_tokens": 1024}) as s:
        for ev in s:
            if ev.type == "content_block_start":
                kinds.append(ev.content_block.type)
            if ev.type == "content_block_delta" and ev.delta.type == "thinking_delta":
                thinking += ev.delta.thinking
            if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                text += ev.delta.text
            if len(thinking) + len(text) > 20:
                break
    if FAMILIES[fam]["think"]:
        assert kinds[0] == "thinking" and thinking
    else:
        assert "thinking" not in kinds and not thinking and text
    no_markers(fam, thinking, text)
