// Package chattemplate renders Hugging Face chat templates: the Jinja
// programs shipped in tokenizer_config.json (or chat_template.jinja) that
// turn a conversation, tool definitions and flags such as enable_thinking
// into the exact prompt text a model was trained on.
//
// Templates are executed by github.com/ardanlabs/jinja (v1.8.0, the last
// release that builds with our Go), set up the way transformers'
// apply_chat_template sets up Python Jinja2 (trim_blocks, lstrip_blocks,
// loop controls), and extended with what HF templates rely on:
//
//   - tojson with json.dumps(ensure_ascii=False) semantics: ", " and ": "
//     separators, insertion key order, non-ASCII kept raw, no HTML
//     escaping, and the indent, separators, sort_keys and ensure_ascii
//     arguments;
//   - Python str() for output and for the trim, string, join, upper and
//     lower filters ("None", "1.0", "['a']"); Python len() for length;
//     list, first and last over strings and mappings;
//   - Python escapes in string literals, Jinja2's newline handling;
//   - the raise_exception(msg) and strftime_now(fmt) globals, with an
//     injectable clock (WithClock).
//
// The engine offers no hook for filters, so the template source is
// rewritten before compiling (see rewrite.go); DESIGN.md lists what still
// differs from Jinja2.
//
// Values keep JSON key order, because tojson output is part of the prompt:
// decode request bodies with DecodeJSON or into *Object.
//
// A template compiles once with New and renders concurrently with Render.
// A failure while rendering (raise_exception, or a template that cannot
// handle its input) is a *TemplateError whose Message is what the template
// said; callers answer such requests with HTTP 400.
package chattemplate
