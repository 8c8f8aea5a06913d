"""Reference renderer for the chattemplate parity tests.

Reads one JSON document on stdin:

    {"now": "2025-03-07T14:05:09",
     "templates": {"name": "source", ...},
     "cases": [{"id": "...", "template": "name", "messages": [...],
                "tools": null | [...], "add_generation_prompt": bool,
                "special_tokens": {...}, "kwargs": {...}}, ...]}

and writes {"results": [{"id": ..., "ok": true, "output": "..."} or
{"id": ..., "ok": false, "error_type": "...", "error": "..."}]} to stdout.

The environment is set up the way Hugging Face transformers'
apply_chat_template sets it up: an ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and the loopcontrols extension, a tojson filter
that is json.dumps(ensure_ascii=False) keeping key order, and the
raise_exception and strftime_now globals. The clock is pinned to "now" so
both sides see the same instant.
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


def render_case(compiled, case):
    template_kwargs = dict(case.get("special_tokens") or {})
    template_kwargs.update(case.get("kwargs") or {})
    return compiled.render(
        messages=case["messages"],
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
