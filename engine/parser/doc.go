// Package parser splits generated model text into content, reasoning and
// tool calls while it streams.
//
// A Parser is built per request with New(name, Options) for one model
// family (qwen3, hermes, qwen3_coder, glm45, phi4_mini, llama3_json,
// mistral, mistral_args, deepseek_v3, harmony, gemma4, think,
// none/passthrough); Detect picks the family from a chat template.
// Add consumes text as it is decoded and returns only what is certain: a
// suffix that could still be the start of a tag is held back until it is
// ruled out, and so is an incomplete UTF-8 sequence, so every emitted
// string is valid UTF-8 and never contains a partial tag. Finish flushes
// what is left at the end of generation.
//
// Families:
//
//   - qwen3, hermes (alias json_tools): <think>…</think> reasoning;
//     <tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>, any number,
//     several objects in one block allowed, "arguments" may also be a JSON
//     string holding an object, "parameters" is accepted; an unpaired
//     <tool_call> inside reasoning ends the reasoning (Qwen3).
//   - qwen3_coder (alias qwen3_xml): as qwen3 but the body is
//     <function=NAME><parameter=KEY>VALUE</parameter>…</function>; values
//     become JSON numbers/bools/null/objects/arrays when they parse (unless
//     Options.ParamTypes says "string"), JSON strings otherwise; where
//     ParamTypes names another type, Python's True/False/None (how
//     Qwen3.5's template writes a bool or null back) are read too.
//     Qwen3.5/3.6's template writes this format too (Detect finds it).
//   - glm45 (aliases glm4_moe, glm4_5): GLM-4.5/4.6's <think> reasoning and
//     <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>…
//     </tool_call>; values as qwen3_coder's (raw text for a string, JSON
//     otherwise, Options.ParamTypes applies) but kept exactly, not trimmed.
//   - phi4_mini (alias phi4): Phi-4-mini's <|tool_call|>[{"name": …,
//     "arguments": {…}}, …]<|/tool_call|> (or one object); no reasoning.
//   - llama3_json: with declared tools only, and only when the output starts
//     (after whitespace) with "{" or <|python_tag|>: a bare
//     {"name": …, "parameters"|"arguments": {…}} object, several separated by
//     ";" or whitespace; otherwise all content. No reasoning.
//   - mistral: [TOOL_CALLS] followed by a JSON array of {name, arguments}
//     (or one object), or the newer NAME[ARGS]{…} / NAME[CALL_ID]id[ARGS]{…}
//     form; text before it is content. [THINK]…[/THINK] is reasoning
//     (Magistral, Ministral 3 Reasoning), an unpaired [TOOL_CALLS] in it
//     ends it. mistral_args is the same parser for templates written in
//     the newer form (Detect: the template has [ARGS]), which a forced
//     call is then written in.
//   - deepseek_v3: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json
//     ARGS```<｜tool▁call▁end｜> (and V3.1's NAME<｜tool▁sep｜>ARGS), the
//     <｜tool▁calls▁begin｜>/<｜tool▁calls▁end｜> section markers are dropped
//     (the begin marker also ends reasoning); <think> reasoning as R1 emits.
//   - harmony (aliases gpt_oss, openai, openai_gptoss): gpt-oss's
//     messages, header (<|channel|>NAME, optional " to=RECIPIENT", content
//     type, <|constrain|>) then <|message|>BODY<|end|>; analysis bodies are
//     reasoning, final bodies, commentary preambles and unknown channels
//     content, and a body addressed to functions.NAME (or any other
//     recipient but assistant, undeclared) a call whose body is the JSON
//     arguments, ended by <|call|>, <|end|> or the end of the output.
//     Bodies are exact (no trimming); two of the same kind are joined by
//     a blank line; a stray <|message|> or <|constrain|> in a body is
//     dropped. Text that is not harmony (no <|message|> within 256
//     bytes, or a short output without markers) is content. Calls come
//     whole, also with StreamArguments.
//   - gemma4 (alias gemma4_text): Gemma 4's thought channel
//     <|channel>thought\n…<channel|> is reasoning; a call is
//     <|tool_call>call:NAME{key:VALUE,…}<tool_call|> (several may share a
//     block) with bare keys, strings between <|"|> tokens, JSON numbers,
//     true/false/null (None too), arrays and nested objects; a
//     <tool_call|> inside a string does not end the call; the
//     <|tool_response> the model ends a call turn with is dropped.
//     Arguments become a compact JSON object in the order written; what
//     the forced-call grammar (grammar.GemmaArguments) writes is read back
//     exactly. gemma4_think is the thought channel alone (tool_choice
//     none; a forced call is still read as gemma4).
//   - think: <think>…</think> reasoning only.
//   - none, passthrough: everything is content, untouched.
//
// <think> (Mistral's [THINK]) opens reasoning anywhere in content;
// Options.StartInReasoning (see StartInReasoning) starts in reasoning for a
// prompt that opened the block (or Gemma 4's thought channel).
//
// Choices shared by all families:
//
//   - A tool call is validated when its body is complete (close tag, or the
//     end of a JSON value for JSON-only formats, or Finish). A body that does
//     not parse is returned verbatim, tags included, as Content; with
//     Options.ErrorOnMalformed it is dropped instead and Finish returns an
//     error wrapping ErrMalformedToolCall. (llama3_json output that is JSON
//     but not shaped as a call, i.e. without a leading "name" key, is always
//     content.)
//   - A call to a name not in Options.Tools is still returned as a call,
//     with ToolCall.Undeclared set (with no declared tools every call is
//     flagged). The server decides what to do with it.
//   - Arguments are always a compact JSON object text ("{}" when absent);
//     key order and non-ASCII text are preserved as generated.
//   - Each call is announced by CallDeltas: first one with Index, ID and
//     Name (empty fragment), then argument fragments of the same Index that
//     concatenate to ToolCall.Arguments. This is the OpenAI chunk sequence
//     (id/name first, then argument fragments) and maps to Anthropic's
//     content_block_start + input_json_delta. By default the deltas come
//     together with the validated ToolCall; with Options.StreamArguments
//     (qwen3/hermes, llama3_json, qwen3_coder, glm45) the header goes out as soon
//     as the name is known and fragments follow as the arguments arrive
//     (JSON compacted on the fly; qwen3_coder and glm45 one parameter at a
//     time).
//   - Reasoning is trimmed of surrounding whitespace; content has leading
//     whitespace trimmed after </think> or a tool call; when tools are
//     declared, trailing whitespace is held back and dropped before a tool
//     call or <think> (without tools it streams at once). Output with no
//     tags passes through exactly, whitespace included (the passthrough
//     family trims nothing at all).
package parser
