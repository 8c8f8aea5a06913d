// Package anthropic is the Anthropic Messages dialect of the frontend:
// POST /v1/messages (streamed or not) and count_tokens (at
// /v1/messages/count_tokens and /v1/count_tokens).
//
// As in router/openai, pure converters (wire request → engine.Request;
// engine events → message or stream events) are kept apart from the
// handlers. Decoding is strict about types and tolerant of unknown fields;
// errors name the field in Anthropic's dotted style (messages.0.content)
// and are answered as {"type":"error","error":{"type","message"}}.
//
// Request mapping: system (string or text blocks) becomes a system
// message; a role "system" entry in messages (current Claude Code sends
// one) stays a system message where it stands, for the chat template to
// render; content blocks become the OpenAI-style messages chat templates
// expect — text blocks joined with "\n", tool_use blocks the assistant's
// tool_calls (arguments as objects), each tool_result a "tool" message with
// tool_call_id (is_error prefixes the content with "Error: "), thinking and
// redacted_thinking the assistant's reasoning_content once their signature
// checks out (signature.go; a bad one is a 400, see router/DESIGN.md,
// "Thinking signatures"); image and
// document blocks are a 400 (our models take text only). tools become
// function tools for the template; tool_choice auto, none (the tools are
// left out of the prompt and no calls are extracted), any and tool (the
// engine constrains the output to a call of the allowed tools, input valid
// against input_schema; disable_parallel_tool_use allows one call); a
// tool's strict is accepted (a forced call's input is constrained to
// input_schema anyway; calls the model makes under auto are parsed as
// written). output_config.format {"type": "json_schema", "schema": …}
// (and the structured-outputs beta's top-level output_format, not both)
// becomes engine.Request.ResponseFormat, the JSON-schema grammar of the
// OpenAI dialect's response_format: the answer's text is one JSON value
// valid against the schema, whole or streamed, after a thinking block
// when thinking is enabled (the constraint starts when the reasoning
// closes; gpt-oss's final message follows its analysis). With a forced
// tool_choice the answer is the call (the format constrains direct output
// only, as on the Messages API); under auto with tools the grammar leaves
// no room for a call: the answer is the JSON. A bad format type, a missing
// or non-object schema, a prefill (incompatible, as on the Messages API)
// and a schema the grammar cannot enforce are a 400 naming the field (the
// engine's refusal names response_format; plan.engineError renames it).
// thinking enabled (budget_tokens ≥ 1024 and below max_tokens) / adaptive /
// between_tools turns the template's enable_thinking on, disabled off;
// enabled also opens a hybrid template's <think> block in the generation
// prompt (engine.Request.StartThinking), so the answer starts with a
// thinking block; the budget is enforced (see below). max_tokens is required and clamped to the node's
// cap when it has one; else the context window bounds the answer.
// cache_control, metadata, context_management (an object),
// output_config.effort, tools' defer_loading,
// anthropic-version and anthropic-beta are accepted and ignored (the list
// of what Claude Code sends is in router/DESIGN.md).
//
// Status codes: 400 invalid_request_error, 401 authentication_error (the
// router's auth middleware writes it in this shape on these routes, key
// from x-api-key or Authorization: Bearer), 404 not_found_error (unknown
// model; an unknown route under /v1/messages or with anthropic-version),
// 405, 413 request_too_large (bodies read past the limit, or a
// Content-Length over it refused by the router before routing — in this
// shape on these routes, see Wants), 429
// rate_limit_error with Retry-After (the engine's hint, at least 1 s) when the engine's queue is full, 529
// overloaded_error with Retry-After: 5 when a model cannot be loaded now
// (Anthropic's status for a temporarily overloaded service), 500
// api_error for engine failures no input causes. No 403 permission_error:
// one key opens every route.
//
// Streaming: message_start (usage.input_tokens from the runner's Tokenize,
// output_tokens 1), content_block_start (index 0, text ""), ping,
// content_block_delta text_delta..., content_block_stop, message_delta
// (stop_reason end_turn | max_tokens | model_context_window_exceeded |
// stop_sequence | tool_use, stop_sequence, the
// cumulative usage), message_stop. An engine error before the first token
// is a plain JSON error with its status; after it, an "error" event ends
// the stream. Final usage follows Anthropic's accounting: input_tokens
// excludes the prompt tokens served from the prefix cache, which
// cache_read_input_tokens reports, and those newly stored in it, which
// cache_creation_input_tokens reports.
//
// Answers are built by one block state machine (stream.go) for both
// shapes: it takes parsed output steps (content, reasoning, tool-call
// deltas, the engine/parser shape) and opens, feeds and closes thinking,
// text and tool_use blocks in order, with stop_reason tool_use after a
// call. Engine events carry the runner's parsed output (Reasoning, Text,
// whole ToolCalls); each event becomes one step: reasoning feeds a
// thinking block (thinking_delta, then a signature_delta before it stops;
// with thinking.display "omitted" no thinking_delta, the block stays empty
// and the signature seals the text), text a text block, each call a tool_use block (id "toolu_" + the
// engine id without "call_", input_json_delta with the whole arguments
// JSON, input the parsed object). Blocks follow the order the events
// arrive: thinking (0), text (1), tool_use (2, ...). FinishToolCalls, or
// any call before a normal stop, is stop_reason tool_use.
//
// Turns: consecutive user (or assistant) messages are merged into one turn,
// as the Messages API does. A final assistant message is a prefill: the
// prompt ends inside it (engine.Request.ContinueFinal) and the answer is
// only the continuation; an empty one is dropped, one ending in whitespace
// or holding tool_use is a 400. thinking.budget_tokens becomes
// engine.Request.ReasoningBudget: once spent, the runner makes the model
// close its <think> block.
package anthropic
