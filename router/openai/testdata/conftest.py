"""What the suites running the official OpenAI and Anthropic Python SDKs
against a node and a forwarding member of its cluster share
(test_family_sdk.py, test_harmony_sdk.py): the environment they read, the
clients, a raw JSON POST, token lookups, and the request pieces and
checks both use. They import it (`from conftest import ...`).

Environment, read only when a suite asks (the other suites in this
directory set none of it):
  FUSION_BASE_URL     a node holding the models
  FUSION_FORWARD_URL  a node of the same cluster without them (it forwards)
  FUSION_API_KEY      the key both accept
"""

import functools
import json
import os
import urllib.request

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]

# The structured-output schema both suites ask for, and its check.
ANSWER = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
          "required": ["answer", "n"], "additionalProperties": False}


def check_answer(text):
    """text is one JSON document valid against ANSWER."""
    doc = json.loads(text)
    assert isinstance(doc, dict) and set(doc) == {"answer", "n"}, text
    assert isinstance(doc["answer"], str) and len(doc["answer"]) <= 8, text
    assert isinstance(doc["n"], int) and not isinstance(doc["n"], bool), text


def api_key():
    return os.environ["FUSION_API_KEY"]


def node_urls():
    """The node holding the models, then the member that forwards to it."""
    return [os.environ["FUSION_BASE_URL"], os.environ["FUSION_FORWARD_URL"]]


def oai(base):
    import openai
    return openai.OpenAI(base_url=base + "/v1", api_key=api_key(), max_retries=0)


def ant(base):
    import anthropic
    return anthropic.Anthropic(base_url=base, api_key=api_key(), max_retries=0)


def http_json(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", "Bearer " + api_key())
    with urllib.request.urlopen(req) as r:
        return json.load(r)


@functools.cache
def token_id(model, text):
    """The one token text is in model's vocabulary (asked of the node holding it)."""
    res = http_json(node_urls()[0] + "/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})
    assert res["count"] == 1, (text, res)
    return res["tokens"][0]


def ban(model, texts):
    """logit_bias banning the tokens texts (a model's end tokens: generation runs to max_tokens)."""
    return {str(token_id(model, s)): -100 for s in texts}


def no_markers(markers, *texts):
    """Control text (markers) never reaches the client."""
    for t in texts:
        if t:
            for m in markers:
                assert m not in t, (m, t)


def reasoning_of(msg):
    return (msg.model_extra or {}).get("reasoning_content")


def chat_both(c, model, **kw):
    """The same request whole and streamed: (response, streamed content, streamed reasoning, last finish reason)."""
    r = c.chat.completions.create(model=model, **kw)
    content, reasoning, last = "", "", None
    for chunk in c.chat.completions.create(model=model, stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.choices:
            d = chunk.choices[0].delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
            last = chunk.choices[0].finish_reason or last
    return r, content, reasoning, last


def anthropic_tools(tools):
    """OpenAI function tools as Anthropic tool definitions."""
    return [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
             "input_schema": t["function"].get("parameters", {"type": "object"})} for t in tools]


def ant_message(a, stream, **kw):
    """An Anthropic message, whole or streamed (the SDK accumulates the events)."""
    if not stream:
        return a.messages.create(**kw)
    with a.messages.stream(**kw) as s:
        return s.get_final_message()
