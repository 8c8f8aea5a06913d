"""Reference for the harmony template test (harmony_test.go).

Reads one JSON document on stdin:

    {"now": "2025-03-07T14:05:09", "seed": 17, "count": 150,
     "template": "<the Harmony template's source>",
     "tokenizer_json": "<path of gpt-oss's tokenizer.json>"}

generates count conversations (system/developer instructions, tools with
typed, optional, enum and defaulted parameters, multi-turn answers with
reasoning, tool-call rounds with preambles and several calls, tool results
answered by id or in order, reasoning efforts, model identities, dates)
and writes, for each, the conversation as a chat API carries it and its
rendering three ways:

  - "harmony": OpenAI's reference renderer (openai-harmony), from the same
    conversation written as harmony messages, with the reasoning the
    template keeps (that of the tool calls of a turn still in progress);
  - "harmony_ids": the token ids openai-harmony renders (its own tiktoken
    implementation of o200k_harmony), a second reference for the
    tokenizer;
  - "jinja": Python jinja2 rendering the template, set up as transformers
    does (render_reference.build_environment).

openai-harmony's o200k_base vocabulary is rebuilt from the tokenizer.json
(engine/tokenizer/testdata/o200k_reference.py), so no download is needed.
"""

import datetime
import json
import os
import random
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tokenizer", "testdata"))
from o200k_reference import harmony_encoding  # noqa: E402
from render_reference import build_environment  # noqa: E402

WORDS = ["the", "weather", "in", "Paris", "is", "sunny", "42", "café", "naïve", "日本語", "😀", "x=1;",
         "don't", "HELLO", "a\nb", "  spaced  ", "\"quoted\"", "<tag>", "{json}", "tab\there", "ünïcödé",
         "multi\n\nline", "3.14", "-7", "path/to/file", "#hash", "emoji🎉", "Ωμέγα", "\\back", "end."]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.calls = 0

    def text(self, lo=1, hi=12):
        return " ".join(self.r.choice(WORDS) for _ in range(self.r.randint(lo, hi)))

    def name(self):
        return self.r.choice(["get_weather", "search", "calc", "send_mail", "lookup", "f", "read_file", "now"]) + str(self.r.randint(0, 99))

    def param(self):
        kind = self.r.choice(["string", "string", "enum", "integer", "number", "boolean", "array", "nullable", "any"])
        p = {}
        if kind == "enum":
            p = {"type": "string", "enum": self.r.sample(["a", "b", "celsius", "fahrenheit", "x y"], self.r.randint(1, 3))}
            if self.r.random() < 0.4:
                p["default"] = p["enum"][0]
        elif kind == "array":
            item = self.r.choice(["string", "number", "integer", "boolean", None])
            p = {"type": "array"}
            if item:
                p["items"] = {"type": item}
        elif kind == "nullable":
            p = {"type": "string", "nullable": True}
        elif kind == "any":
            p = {}
        else:
            p = {"type": kind}
            if self.r.random() < 0.3:
                p["default"] = {"string": "dflt value", "integer": 3, "number": 2.5, "boolean": True}[kind]
        if self.r.random() < 0.6:
            p["description"] = self.text(1, 6).replace("\n", " ")
        return p

    def tool(self):
        f = {"name": self.name()}
        r = self.r.random()
        f["description"] = "" if r < 0.1 else (self.text() + "\n" + self.text() if r < 0.25 else self.text().replace("\n", " "))
        r = self.r.random()
        if r < 0.15:
            pass  # no parameters: () => any
        elif r < 0.25:
            f["parameters"] = {"type": "object", "properties": {}}
        else:
            props = {}
            for i in range(self.r.randint(1, 5)):
                props["p%d_%s" % (i, self.r.choice(["q", "city", "n", "flag", "items"]))] = self.param()
            params = {"type": "object", "properties": props}
            req = [k for k in props if self.r.random() < 0.5]
            if req or self.r.random() < 0.5:
                params["required"] = req
            f["parameters"] = params
        return {"type": "function", "function": f}

    def args(self):
        obj = {}
        for _ in range(self.r.randint(0, 3)):
            obj[self.r.choice(["city", "q", "n", "unit"])] = self.r.choice([self.text(1, 3), self.r.randint(-5, 500), True, None, [1, "two"]])
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))

    def call(self, names):
        self.calls += 1
        return {"id": "call_%d" % self.calls, "type": "function",
                "function": {"name": self.r.choice(names), "arguments": self.args()}}

    def case(self):
        r = self.r
        tools = None
        if r.random() < 0.6:
            tools = [self.tool() for _ in range(r.randint(1, 4))]
        elif r.random() < 0.2:
            tools = []
        names = [t["function"]["name"] for t in tools] if tools else ["get_weather1", "search2"]
        kwargs = {}
        if r.random() < 0.7:
            kwargs["reasoning_effort"] = r.choice(["low", "medium", "high"])
        d = r.random()
        if d < 0.5:
            kwargs["current_date"] = r.choice(["2026-12-02", "2025-01-31"])
        elif d < 0.6:
            kwargs["current_date"] = ""
        if r.random() < 0.2:
            kwargs["model_identity"] = "You are a helpful assistant named " + self.text(1, 2)
        msgs = []
        if r.random() < 0.6:
            msgs.append({"role": r.choice(["system", "system", "developer"]), "content": self.text(1, 30)})
        turns = r.randint(1, 4)
        for t in range(turns):
            msgs.append({"role": "user", "content": self.text(1, 20)})
            last = t == turns - 1
            if last and r.random() < 0.6:
                break
            for _ in range(r.choice([0, 0, 1, 1, 2])):
                m = {"role": "assistant", "content": self.text() if r.random() < 0.3 else ""}
                if r.random() < 0.7:
                    m["reasoning_content"] = self.text(1, 25)
                m["tool_calls"] = [self.call(names) for _ in range(r.choice([1, 1, 1, 2, 3]))]
                msgs.append(m)
                results = [{"role": "tool", "tool_call_id": c["id"], "content": self.text(1, 15)} for c in m["tool_calls"]]
                if r.random() < 0.3:
                    r.shuffle(results)
                if r.random() < 0.2:  # no ids: answered in call order
                    results = [{"role": "tool", "content": self.text(1, 15)} for _ in m["tool_calls"]]
                msgs.extend(results)
            if last and r.random() < 0.5 and msgs[-1]["role"] == "tool":
                break  # the turn is still in progress: the model answers the tool results
            a = {"role": "assistant", "content": self.text(1, 20)}
            if r.random() < 0.6:
                a["reasoning_content"] = self.text(1, 20)
            msgs.append(a)
            if last:
                msgs.append({"role": "user", "content": self.text()})
        return {"messages": msgs, "tools": tools, "kwargs": kwargs, "add_generation_prompt": True}


def harmony_render(h, enc, case, today):
    """The case written as harmony messages, rendered by openai-harmony."""
    kw = case["kwargs"]
    effort = h.ReasoningEffort[kw.get("reasoning_effort", "medium").upper()]
    sysc = h.SystemContent.new().with_reasoning_effort(effort)
    date = kw.get("current_date", today)
    if date:
        sysc = sysc.with_conversation_start_date(date)
    if "model_identity" in kw:
        sysc = sysc.with_model_identity(kw["model_identity"])
    out = [h.Message.from_role_and_content(h.Role.SYSTEM, sysc)]
    msgs = case["messages"]
    instructions = ""
    if msgs and msgs[0]["role"] in ("system", "developer"):
        instructions, msgs = msgs[0]["content"], msgs[1:]
    tools = case["tools"]
    if instructions or tools:
        dev = h.DeveloperContent.new()
        if instructions:
            dev = dev.with_instructions(instructions)
        if tools:
            descs = []
            for t in tools:
                f = t["function"]
                descs.append(h.ToolDescription.new(f["name"], f["description"], parameters=f.get("parameters")))
            dev = dev.with_function_tools(descs)
        out.append(h.Message.from_role_and_content(h.Role.DEVELOPER, dev))
    ids, names, nxt = [], [], 0
    for i, m in enumerate(msgs):
        role = m["role"]
        if role == "user":
            out.append(h.Message.from_role_and_content(h.Role.USER, m["content"]))
        elif role == "assistant" and m.get("tool_calls"):
            answered = any(n["role"] == "assistant" and not n.get("tool_calls") for n in msgs[i + 1:])
            if m.get("reasoning_content") and not answered:
                out.append(h.Message.from_role_and_content(h.Role.ASSISTANT, m["reasoning_content"]).with_channel("analysis"))
            if m.get("content"):
                out.append(h.Message.from_role_and_content(h.Role.ASSISTANT, m["content"]).with_channel("commentary"))
            ids, names, nxt = [], [], 0
            for c in m["tool_calls"]:
                ids.append(c["id"])
                names.append(c["function"]["name"])
                out.append(h.Message.from_role_and_content(h.Role.ASSISTANT, c["function"]["arguments"])
                           .with_channel("commentary").with_recipient("functions." + c["function"]["name"]).with_content_type("json"))
        elif role == "assistant":
            out.append(h.Message.from_role_and_content(h.Role.ASSISTANT, m["content"]).with_channel("final"))
        elif role == "tool":
            name = names[ids.index(m["tool_call_id"])] if "tool_call_id" in m else names[nxt]
            nxt += 1
            out.append(h.Message.from_author_and_content(h.Author.new(h.Role.TOOL, "functions." + name), m["content"])
                       .with_channel("commentary").with_recipient("assistant"))
    tokens = enc.render_conversation_for_completion(
        h.Conversation.from_messages(out), h.Role.ASSISTANT, h.RenderConversationConfig(auto_drop_analysis=False))
    return enc.decode_utf8(tokens), list(tokens)


def main():
    request = json.load(sys.stdin)
    now = datetime.datetime.fromisoformat(request["now"])
    with tempfile.TemporaryDirectory() as vocab_dir:
        h, enc = harmony_encoding(request["tokenizer_json"], vocab_dir)
        env = build_environment(now)
        template = env.from_string(request["template"])
        gen = Gen(request["seed"])
        cases = []
        for _ in range(request["count"]):
            case = gen.case()
            case["harmony"], case["harmony_ids"] = harmony_render(h, enc, case, now.strftime("%Y-%m-%d"))
            case["jinja"] = template.render(messages=case["messages"], tools=case["tools"],
                                            add_generation_prompt=case["add_generation_prompt"], **case["kwargs"])
            cases.append(case)
    json.dump({"cases": cases}, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    sys.stdout.reconfigure(encoding="utf-8")
    main()
