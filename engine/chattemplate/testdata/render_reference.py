"""Reference renderer for the chattemplate parity tests.

Reads one JSON document on stdin:

    {"now": "2025-03-07T14:05:09",
     "templates": {"name": "source", ...},
     "cases": [{"id": "...", "template": "name", "messages": [...],
                "tools": null | [...], "add_generation_prompt": bool,
                "special_tokens": {...}, "kwargs": {...},
                "conform": absent | {"string_arguments": bool,
                                     "null_call_content": bool}}, ...]}

and writes {"results": [{"id": ..., "ok": true, "output": "..."} or
{"id": ..., "ok": false, "error_type": "...", "error": "..."}]} to stdout.

The environment is set up the way Hugging Face transformers'
apply_chat_template sets it up: an ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and the loopcontrols extension, a tojson filter
that is json.dumps(ensure_ascii=False) keeping key order, and the
raise_exception and strftime_now globals. The clock is pinned to "now" so
both sides see the same instant.

A case with "conform" holds a conversation as a chat API carries it (tool
arguments as JSON text or objects, content null); conform() puts it into
the shape the template was trained on, independently of the Go code that
does the same, before rendering.
"""

import datetime
import json
import sys

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def build_environment(now):
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            x,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def conform(messages, shape):
    """Hands the template tool-call history in the shape it expects:
    arguments as JSON text (json.dumps of an object) or as the object
    json.loads makes of the text; content null for an assistant message
    with calls where the template wants it, else "" for null content."""
    out = []
    for message in messages:
        if message.get("role") != "assistant":
            out.append(message)
            continue
        message = dict(message)
        calls = message.get("tool_calls") or []
        if shape["null_call_content"] and calls:
            if message.get("content", "") == "":
                message["content"] = None
        elif message.get("content") is None:
            message["content"] = ""
        if calls:
            conformed = []
            for call in calls:
                call = dict(call)
                function = dict(call["function"])
                arguments = function.get("arguments")
                if shape["string_arguments"] and isinstance(arguments, dict):
                    function["arguments"] = json.dumps(arguments, ensure_ascii=False)
                elif not shape["string_arguments"] and isinstance(arguments, str):
                    try:
                        decoded = json.loads(arguments)
                    except ValueError:
                        decoded = None
                    if isinstance(decoded, dict):
                        function["arguments"] = decoded
                call["function"] = function
                conformed.append(call)
            message["tool_calls"] = conformed
        out.append(message)
    return out


def render_case(compiled, case):
    messages = case["messages"]
    if case.get("conform") is not None:
        messages = conform(messages, case["conform"])
    template_kwargs = dict(case.get("special_tokens") or {})
    template_kwargs.update(case.get("kwargs") or {})
    return compiled.render(
        messages=messages,
        tools=case.get("tools"),
        documents=None,
        add_generation_prompt=case.get("add_generation_prompt", False),
        **template_kwargs,
    )


def main():
    request = json.load(sys.stdin)
    now = datetime.datetime.fromisoformat(request["now"])
    env = build_environment(now)

    compiled = {}
    results = []
    for name, source in request["templates"].items():
        try:
            compiled[name] = env.from_string(source)
        except Exception as exc:  # noqa: BLE001 - reported to the Go side
            compiled[name] = exc

    for case in request["cases"]:
        tmpl = compiled[case["template"]]
        result = {"id": case["id"]}
        try:
            if isinstance(tmpl, Exception):
                raise tmpl
            result["output"] = render_case(tmpl, case)
            result["ok"] = True
        except Exception as exc:  # noqa: BLE001 - reported to the Go side
            result["ok"] = False
            result["error_type"] = type(exc).__name__
            result["error"] = str(exc)
        results.append(result)

    json.dump({"results": results}, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    sys.stdout.reconfigure(encoding="utf-8")
    main()
