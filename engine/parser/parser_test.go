package parser

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"fusion/engine/chattemplate"
	"fusion/internal/testenv"

	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

type result struct {
	Content, Reasoning string
	Calls              []ToolCall
}

type tcase struct {
	name  string
	in    string
	opts  Options
	want  result
	err   bool // Finish must fail
	noTag bool // expected content legitimately contains tags (malformed/passthrough)
	// streamWant, when set, is the outcome under Options.StreamArguments (a
	// call that turns out malformed after its name was read: dropped, and
	// Finish fails).
	streamWant *result
}

var tools = []string{"get_weather", "search"}

func call(i int, name, args string) ToolCall {
	return ToolCall{Index: i, ID: fmt.Sprintf("call_%d", i), Name: name, Arguments: args, Undeclared: name != "get_weather" && name != "search"}
}

func calls(c ...ToolCall) []ToolCall { return c }

// familyTags are the markers a family's Content/Reasoning must never show.
var familyTags = map[string][]string{
	Qwen3:       {"<tool_call>", "</tool_call>", "<think>", "</think>"},
	Hermes:      {"<tool_call>", "</tool_call>", "<think>", "</think>"},
	Qwen3Coder:  {"<tool_call>", "</tool_call>", "<think>", "</think>", "<function=", "<parameter="},
	Llama3JSON:  {"<|python_tag|>"},
	Mistral:     {"[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]"},
	MistralArgs: {"[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]"},
	DeepSeekV3:  {dsCallsBegin, dsCallsEnd, dsCallBegin, dsCallEnd, dsSep, "<think>", "</think>"},
	Think:       {"<think>", "</think>"},
	Harmony:     harmonyMarkers,
	Gemma4:      {gemmaChannel, gemmaThoughtClose, gemmaCallOpen, gemmaCallClose, gemmaQuote, gemmaResponse},
	Gemma4Think: {gemmaChannel, gemmaThoughtClose},
	GLM45:       {"<tool_call>", "</tool_call>", "<think>", "</think>", glmValueOpen, glmValueClose},
	Phi4Mini:    {phi4CallOpen, phi4CallClose},
	None:        nil,
}

const (
	wCall   = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	wCall2  = "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"rain\", \"n\": 3}}\n</tool_call>"
	nested  = `{"filter": {"tags": ["a", "b}"], "range": {"min": 1, "max": [2, 3.5, {"x": null}]}}, "q": "x}y{\"z"}`
	nestedC = `{"filter":{"tags":["a","b}"],"range":{"min":1,"max":[2,3.5,{"x":null}]}},"q":"x}y{\"z"}`
)

func hermesCases() []tcase {
	return []tcase{
		{name: "plain", in: "Hello, world!\nSecond line.", want: result{Content: "Hello, world!\nSecond line."}},
		{name: "lt not a tag", in: "a < b and <b>bold</b> <tool x", want: result{Content: "a < b and <b>bold</b> <tool x"}},
		{name: "reasoning then answer", in: "<think>\nLet me think.\nStep 2.\n</think>\n\nThe answer is 4.", want: result{Reasoning: "Let me think.\nStep 2.", Content: "The answer is 4."}},
		{name: "prompt opened think", in: "I should add.\n</think>\n\n4", opts: Options{StartInReasoning: true}, want: result{Reasoning: "I should add.", Content: "4"}},
		{name: "empty think", in: "<think>\n\n</think>\n\nHi", want: result{Content: "Hi"}},
		{name: "plain text kept exactly", in: "\n  Hi there.\n\n", want: result{Content: "\n  Hi there.\n\n"}},
		{name: "only whitespace", in: "\n\n\n", want: result{Content: "\n\n\n"}},
		{name: "one call", in: wCall, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "several calls", in: wCall + "\n" + wCall2, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`), call(1, "search", `{"q":"rain","n":3}`))}},
		{name: "calls after reasoning", in: "<think>\nNeed weather.\n</think>\n\n" + wCall + "\n" + wCall2, want: result{Reasoning: "Need weather.", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`), call(1, "search", `{"q":"rain","n":3}`))}},
		{name: "text before call", in: "Let me check.\n\n" + wCall, want: result{Content: "Let me check.", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "text after call", in: wCall + "\nDone.", want: result{Content: "Done.", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{streamWant: &result{Content: "Hi"}, name: "malformed json", noTag: true, in: "Hi\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
			want: result{Content: "Hi<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>"}},
		{streamWant: &result{Content: "Hi"}, name: "malformed json error", err: true, opts: Options{ErrorOnMalformed: true}, in: "Hi\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>", want: result{Content: "Hi"}},
		{name: "undeclared tool", in: "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>", want: result{Calls: calls(call(0, "launch", `{}`))}},
		{name: "close tag inside a string argument", in: "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a </tool_call> \\\" b\"}}\n</tool_call>\nafter",
			want: result{Content: "after", Calls: calls(call(0, "search", `{"q":"a </tool_call> \" b"}`))}},
		{name: "unicode arguments", in: "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"Zürich 東京 🌍 \\u00e9\"}}\n</tool_call>", want: result{Calls: calls(call(0, "search", `{"q":"Zürich 東京 🌍 \u00e9"}`))}},
		{name: "unicode content", in: "<think>Größe 🌍</think>日本語のテキスト 🎉", want: result{Reasoning: "Größe 🌍", Content: "日本語のテキスト 🎉"}},
		{name: "nested arguments", in: "<tool_call>\n{\"name\": \"search\", \"arguments\": " + nested + "}\n</tool_call>", want: result{Calls: calls(call(0, "search", nestedC))}},
		{name: "two objects in one block", in: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n{\"name\": \"search\", \"arguments\": {\"q\": \"rain\", \"n\": 3}}\n</tool_call>", want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`), call(1, "search", `{"q":"rain","n":3}`))}},
		{name: "arguments as string", in: "<tool_call>\n{\"name\": \"search\", \"arguments\": \"{\\\"q\\\": 1}\"}\n</tool_call>", want: result{Calls: calls(call(0, "search", `{"q":1}`))}},
		{name: "unpaired tool_call ends reasoning", opts: Options{StartInReasoning: true}, in: "I need the weather.\n\n" + wCall, want: result{Reasoning: "I need the weather.", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "unterminated valid call", in: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n", want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "truncated call", noTag: true, in: "<tool_call>\n{\"name\": \"get_weath", want: result{Content: "<tool_call>\n{\"name\": \"get_weath"}},
		{name: "partial tag at end", noTag: true, in: "Done <tool_ca", want: result{Content: "Done <tool_ca"}},
	}
}

func coderCases() []tcase {
	c1 := "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
	c2 := "<tool_call>\n<function=search>\n<parameter=q>\nline1\nline2 <b> & \"quoted\"\n</parameter>\n</function>\n</tool_call>"
	return []tcase{
		{name: "plain", in: "Just text.", want: result{Content: "Just text."}},
		{name: "reasoning then answer", in: "<think>\nhmm\n</think>\n\nAnswer.", want: result{Reasoning: "hmm", Content: "Answer."}},
		{name: "prompt opened think", opts: Options{StartInReasoning: true}, in: "hmm\n</think>\n\nAnswer.", want: result{Reasoning: "hmm", Content: "Answer."}},
		{name: "one call", in: c1, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris","days":3}`))}},
		{name: "several calls", in: c1 + "\n" + c2, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris","days":3}`), call(1, "search", `{"q":"line1\nline2 <b> & \"quoted\""}`))}},
		{name: "calls after reasoning", in: "<think>\nweather\n</think>\n\n" + c1, want: result{Reasoning: "weather", Calls: calls(call(0, "get_weather", `{"city":"Paris","days":3}`))}},
		{name: "text before call", in: "Checking.\n" + c1, want: result{Content: "Checking.", Calls: calls(call(0, "get_weather", `{"city":"Paris","days":3}`))}},
		{name: "typed values", in: "<tool_call>\n<function=search>\n<parameter=flag>\ntrue\n</parameter>\n<parameter=n>\n-1.5e3\n</parameter>\n<parameter=zip>\n007\n</parameter>\n<parameter=obj>\n" + nested + "\n</parameter>\n<parameter=none>\nnull\n</parameter>\n<parameter=s>\n\"q\"\n</parameter>\n</function>\n</tool_call>",
			want: result{Calls: calls(call(0, "search", `{"flag":true,"n":-1.5e3,"zip":"007","obj":`+nestedC+`,"none":null,"s":"\"q\""}`))}},
		{name: "schema string types", opts: Options{ParamTypes: map[string]map[string]string{"search": {"zip": "string", "flag": "string", "n": "integer"}}},
			in:   "<tool_call>\n<function=search>\n<parameter=zip>\n12345\n</parameter>\n<parameter=flag>\ntrue\n</parameter>\n<parameter=n>\n7\n</parameter>\n</function>\n</tool_call>",
			want: result{Calls: calls(call(0, "search", `{"zip":"12345","flag":"true","n":7}`))}},
		{name: "python literals by schema type", opts: Options{ParamTypes: map[string]map[string]string{"search": {"ok": "boolean", "no": "boolean", "n": "integer", "s": "string", "b": "string"}}},
			in:   "<tool_call>\n<function=search>\n<parameter=ok>\nTrue\n</parameter>\n<parameter=no>\nFalse\n</parameter>\n<parameter=n>\nNone\n</parameter>\n<parameter=s>\nNone\n</parameter>\n<parameter=b>\nTrue\n</parameter>\n<parameter=u>\nTrue\n</parameter>\n</function>\n</tool_call>",
			want: result{Calls: calls(call(0, "search", `{"ok":true,"no":false,"n":null,"s":"None","b":"True","u":"True"}`))}},
		{streamWant: &result{}, name: "malformed", noTag: true, in: "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</tool_call>", want: result{Content: "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</tool_call>"}},
		{name: "undeclared tool", in: "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>", want: result{Calls: calls(call(0, "rm_rf", `{}`))}},
		{name: "unicode arguments", in: "<tool_call>\n<function=search>\n<parameter=q>\nZürich 東京 🌍\n</parameter>\n</function>\n</tool_call>", want: result{Calls: calls(call(0, "search", `{"q":"Zürich 東京 🌍"}`))}},
		{name: "unpaired tool_call ends reasoning", opts: Options{StartInReasoning: true}, in: "plan\n" + c1, want: result{Reasoning: "plan", Calls: calls(call(0, "get_weather", `{"city":"Paris","days":3}`))}},
	}
}

func llamaCases() []tcase {
	o := Options{Tools: tools}
	return []tcase{
		{name: "plain", opts: o, in: "The capital is Paris.", want: result{Content: "The capital is Paris."}},
		{name: "one call", opts: o, in: `{"name": "get_weather", "parameters": {"city": "Paris"}}`, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "python tag", opts: o, in: `<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}`, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "leading whitespace, arguments key", opts: o, in: "\n\n  {\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n", want: result{Calls: calls(call(0, "search", `{"q":"x"}`))}},
		{name: "several calls", opts: o, in: `{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "search", "parameters": {"q": "rain", "n": 3}}`, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`), call(1, "search", `{"q":"rain","n":3}`))}},
		{name: "text before call", opts: o, in: `Sure: {"name": "get_weather", "parameters": {"city": "Paris"}}`, want: result{Content: `Sure: {"name": "get_weather", "parameters": {"city": "Paris"}}`}},
		{streamWant: &result{}, name: "malformed", opts: o, in: `{"name": "get_weather", "parameters": {"city": "Paris"}`, want: result{Content: `{"name": "get_weather", "parameters": {"city": "Paris"}`}},
		{name: "not a call", opts: o, in: `{"answer": 42} is the JSON`, want: result{Content: `{"answer": 42} is the JSON`}},
		{name: "not a call, strict", opts: Options{Tools: tools, ErrorOnMalformed: true}, in: `{"answer": 42} is the JSON`, want: result{Content: `{"answer": 42} is the JSON`}},
		{streamWant: &result{}, name: "malformed, strict", err: true, opts: Options{Tools: tools, ErrorOnMalformed: true}, in: `{"name": "get_weather", "parameters": {"city": }}`, want: result{}},
		{name: "undeclared tool", opts: o, in: `{"name": "launch", "parameters": {}}`, want: result{Calls: calls(call(0, "launch", `{}`))}},
		{name: "unicode arguments", opts: o, in: `{"name": "search", "parameters": {"q": "Zürich 東京 🌍"}}`, want: result{Calls: calls(call(0, "search", `{"q":"Zürich 東京 🌍"}`))}},
		{name: "nested arguments", opts: o, in: `{"name": "search", "parameters": ` + nested + `}`, want: result{Calls: calls(call(0, "search", nestedC))}},
		{name: "no tools declared", in: `{"name": "get_weather", "parameters": {"city": "Paris"}}`, want: result{Content: `{"name": "get_weather", "parameters": {"city": "Paris"}}`}},
		{name: "builtin python call", opts: o, noTag: true, in: `<|python_tag|>brave_search.call(query="x")`, want: result{Content: `<|python_tag|>brave_search.call(query="x")`}},
		{name: "think ignored", opts: Options{Tools: tools, StartInReasoning: true}, in: "Hi <think>", want: result{Content: "Hi <think>"}},
	}
}

func mistralCases() []tcase {
	a := `[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]`
	return []tcase{
		{name: "plain", in: "Bonjour [1, 2] [TOOL", want: result{Content: "Bonjour [1, 2] [TOOL"}},
		{name: "one call", in: a, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "several calls", in: `[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}, {"name": "search", "arguments": {"q": "rain", "n": 3}}]`, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`), call(1, "search", `{"q":"rain","n":3}`))}},
		{name: "text before call", in: "Let me check.\n" + a, want: result{Content: "Let me check.", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "name args form", in: `[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]search[CALL_ID]a1b2c3d4e[ARGS]{"q": "x"}`, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`), call(1, "search", `{"q":"x"}`))}},
		{name: "malformed", noTag: true, in: `[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": }}]`, want: result{Content: `[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": }}]`}},
		{name: "undeclared tool", in: `[TOOL_CALLS][{"name": "launch", "arguments": {}}]`, want: result{Calls: calls(call(0, "launch", `{}`))}},
		{name: "unicode arguments", in: `[TOOL_CALLS][{"name": "search", "arguments": {"q": "Zürich 東京 🌍"}}]`, want: result{Calls: calls(call(0, "search", `{"q":"Zürich 東京 🌍"}`))}},
		{name: "nested arguments", in: `[TOOL_CALLS][{"name": "search", "arguments": ` + nested + `}]`, want: result{Calls: calls(call(0, "search", nestedC))}},
		// Magistral / Ministral 3 Reasoning: [THINK]…[/THINK] before the answer or the calls.
		{name: "reasoning then answer", in: "[THINK]Let me think.\n[1, 2] Step 2.\n[/THINK]\n\nThe answer is 4.", want: result{Reasoning: "Let me think.\n[1, 2] Step 2.", Content: "The answer is 4."}},
		{name: "reasoning then calls", in: "[THINK]Need weather. Größe 🌍[/THINK]" + `[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]search[ARGS]{"q": "[/THINK]", "n": 3}`,
			want: result{Reasoning: "Need weather. Größe 🌍", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`), call(1, "search", `{"q":"[/THINK]","n":3}`))}},
		{name: "reasoning, text, call", in: "[THINK]plan[/THINK]Checking.\n" + a, want: result{Reasoning: "plan", Content: "Checking.", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "empty reasoning", in: "[THINK][/THINK]Hi", want: result{Content: "Hi"}},
		{name: "prompt opened reasoning", opts: Options{StartInReasoning: true}, in: "hmm\n[/THINK]Answer.", want: result{Reasoning: "hmm", Content: "Answer."}},
		{name: "unpaired [TOOL_CALLS] ends reasoning", opts: Options{StartInReasoning: true}, in: "plan\n" + a, want: result{Reasoning: "plan", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "unterminated reasoning", in: "Sure. [THINK]still going [TH", want: result{Content: "Sure.", Reasoning: "still going [TH"}},
	}
}

func deepseekCases() []tcase {
	c := func(name, args string) string {
		return dsCallBegin + "function" + dsSep + name + "\n```json\n" + args + "\n```" + dsCallEnd
	}
	return []tcase{
		{name: "plain", in: "Hello <｜tool", noTag: true, want: result{Content: "Hello <｜tool"}},
		{name: "reasoning then answer", in: "<think>\nhmm\n</think>\n\nFour.", want: result{Reasoning: "hmm", Content: "Four."}},
		{name: "prompt opened think", opts: Options{StartInReasoning: true}, in: "hmm\n</think>\n\nFour.", want: result{Reasoning: "hmm", Content: "Four."}},
		{name: "one call", in: dsCallsBegin + c("get_weather", `{"city": "Paris"}`) + dsCallsEnd, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "several calls", in: dsCallsBegin + c("get_weather", `{"city": "Paris"}`) + "\n" + c("search", `{"q": "rain", "n": 3}`) + dsCallsEnd, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`), call(1, "search", `{"q":"rain","n":3}`))}},
		{name: "calls after reasoning", in: "<think>plan</think>\n\nChecking.\n\n" + dsCallsBegin + c("get_weather", `{"city": "Paris"}`) + dsCallsEnd, want: result{Reasoning: "plan", Content: "Checking.", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "v3.1 form", in: dsCallsBegin + dsCallBegin + "search" + dsSep + `{"q": "x"}` + dsCallEnd + dsCallsEnd, want: result{Calls: calls(call(0, "search", `{"q":"x"}`))}},
		{name: "malformed", noTag: true, in: dsCallsBegin + c("get_weather", `{"city": `) + dsCallsEnd, want: result{Content: c("get_weather", `{"city": `)}},
		{name: "undeclared tool", in: dsCallsBegin + c("launch", `{}`) + dsCallsEnd, want: result{Calls: calls(call(0, "launch", `{}`))}},
		{name: "unicode and nested", in: dsCallsBegin + c("search", nested) + c("search", `{"q": "東京 🌍"}`) + dsCallsEnd, want: result{Calls: calls(call(0, "search", nestedC), call(1, "search", `{"q":"東京 🌍"}`))}},
		{name: "calls straight from reasoning", opts: Options{StartInReasoning: true}, in: "plan\n" + dsCallsBegin + c("search", `{"q": "x"}`) + dsCallsEnd, want: result{Reasoning: "plan", Calls: calls(call(0, "search", `{"q":"x"}`))}},
	}
}

// glmCases: GLM-4.5/4.6 calls as their template writes them (string
// values raw, others JSON) and <think> reasoning.
func glmCases() []tcase {
	c1 := "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
	c2 := "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>line1\nline2 <b> & \"quoted\" </arg_key></arg_value>\n</tool_call>"
	w1 := call(0, "get_weather", `{"city":"Paris","days":3}`)
	return []tcase{
		{name: "plain", in: "Hello, world!\nSecond line.", want: result{Content: "Hello, world!\nSecond line."}},
		{name: "lt not a tag", in: "a < b <arg_key> <tool x", noTag: true, want: result{Content: "a < b <arg_key> <tool x"}},
		{name: "reasoning then answer", in: "\n<think>Let me think.</think>\nThe answer is 4.", want: result{Reasoning: "Let me think.", Content: "The answer is 4."}},
		{name: "empty think", in: "\n<think></think>\nHi", want: result{Content: "Hi"}},
		{name: "one call", in: c1, want: result{Calls: calls(w1)}},
		{name: "several calls", in: "\n<think></think>\n" + c1 + "\n" + c2, want: result{Calls: calls(w1, call(1, "search", `{"q":"line1\nline2 <b> & \"quoted\" </arg_key>"}`))}},
		{name: "calls after reasoning and text", in: "\n<think>Need weather.</think>\nChecking.\n" + c1, want: result{Reasoning: "Need weather.", Content: "Checking.", Calls: calls(w1)}},
		{name: "no arguments", in: "<tool_call>search\n</tool_call>", want: result{Calls: calls(call(0, "search", `{}`))}},
		{name: "name alone", in: "<tool_call>search</tool_call>", want: result{Calls: calls(call(0, "search", `{}`))}},
		{name: "typed values", in: "<tool_call>search\n<arg_key>flag</arg_key>\n<arg_value>true</arg_value>\n<arg_key>obj</arg_key>\n<arg_value>" + nested + "</arg_value>\n<arg_key>none</arg_key>\n<arg_value>null</arg_value>\n<arg_key>zip</arg_key>\n<arg_value>007</arg_value>\n<arg_key>flag</arg_key>\n<arg_value>false</arg_value>\n</tool_call>",
			want: result{Calls: calls(call(0, "search", `{"flag":true,"obj":`+nestedC+`,"none":null,"zip":"007"}`))}},
		{name: "schema string types", opts: Options{ParamTypes: map[string]map[string]string{"search": {"zip": "string"}}},
			in:   "<tool_call>search\n<arg_key>zip</arg_key>\n<arg_value>12345</arg_value>\n<arg_key>n</arg_key>\n<arg_value>7</arg_value>\n</tool_call>",
			want: result{Calls: calls(call(0, "search", `{"zip":"12345","n":7}`))}},
		{name: "values kept exactly", in: "<tool_call>search\n<arg_key> q </arg_key><arg_value>  two  spaces \n</arg_value></tool_call>", want: result{Calls: calls(call(0, "search", `{"q":"  two  spaces \n"}`))}},
		{name: "unicode", in: "\n<think>Größe 🌍</think>\n日本語 🎉<tool_call>search\n<arg_key>城市</arg_key>\n<arg_value>Zürich 東京 🌍</arg_value>\n</tool_call>",
			want: result{Reasoning: "Größe 🌍", Content: "日本語 🎉", Calls: calls(call(0, "search", `{"城市":"Zürich 東京 🌍"}`))}},
		{name: "undeclared tool", in: "<tool_call>launch\n</tool_call>", want: result{Calls: calls(call(0, "launch", `{}`))}},
		{streamWant: &result{Content: "Hi"}, name: "malformed", noTag: true, in: "Hi\n<tool_call>search\n<arg_key>q</arg_key>\nrain\n</tool_call>", want: result{Content: "Hi<tool_call>search\n<arg_key>q</arg_key>\nrain\n</tool_call>"}},
		{streamWant: &result{Content: "Hi"}, name: "malformed error", err: true, opts: Options{ErrorOnMalformed: true}, in: "Hi\n<tool_call>search\n<arg_value>x</arg_value>\n</tool_call>", want: result{Content: "Hi"}},
		{name: "unpaired tool_call ends reasoning", opts: Options{StartInReasoning: true}, in: "plan\n" + c1, want: result{Reasoning: "plan", Calls: calls(w1)}},
		{name: "unterminated valid call", in: "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>", want: result{Calls: calls(w1)}},
		{name: "partial tag at end", noTag: true, in: "Done <tool_ca", want: result{Content: "Done <tool_ca"}},
	}
}

// phi4Cases: Phi-4-mini's JSON calls between its tool-call tokens.
func phi4Cases() []tcase {
	a := `<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|/tool_call|>`
	w := call(0, "get_weather", `{"city":"Paris"}`)
	return []tcase{
		{name: "plain", in: "Hello [1, 2] <|tool", noTag: true, want: result{Content: "Hello [1, 2] <|tool"}},
		{name: "one call", in: a, want: result{Calls: calls(w)}},
		{name: "several calls", in: `<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "search", "parameters": {"q": "rain", "n": 3}}]<|/tool_call|>`, want: result{Calls: calls(w, call(1, "search", `{"q":"rain","n":3}`))}},
		{name: "one object", in: `<|tool_call|>{"name": "search", "arguments": {"q": "x"}}<|/tool_call|>`, want: result{Calls: calls(call(0, "search", `{"q":"x"}`))}},
		{name: "two blocks", in: a + "\n" + `<|tool_call|>[{"name": "search", "arguments": "{\"q\": 1}"}]<|/tool_call|>`, want: result{Calls: calls(w, call(1, "search", `{"q":1}`))}},
		{name: "text around", in: "Let me check.\n" + a + "\nDone.", want: result{Content: "Let me check.Done.", Calls: calls(w)}},
		{name: "close tag inside a string", in: `<|tool_call|>[{"name": "search", "arguments": {"q": "a <|/tool_call|> b"}}]<|/tool_call|>`, want: result{Calls: calls(call(0, "search", `{"q":"a <|/tool_call|> b"}`))}},
		{name: "malformed", noTag: true, in: `<|tool_call|>[{"name": "get_weather", "arguments": {"city": }}]<|/tool_call|>`, want: result{Content: `<|tool_call|>[{"name": "get_weather", "arguments": {"city": }}]<|/tool_call|>`}},
		{name: "malformed error", err: true, opts: Options{ErrorOnMalformed: true}, in: `Hi<|tool_call|>[]<|/tool_call|>`, want: result{Content: "Hi"}},
		{name: "undeclared tool", in: `<|tool_call|>[{"name": "launch", "arguments": {}}]<|/tool_call|>`, want: result{Calls: calls(call(0, "launch", `{}`))}},
		{name: "unicode and nested", in: `<|tool_call|>[{"name": "search", "arguments": ` + nested + `}, {"name": "search", "arguments": {"q": "東京 🌍"}}]<|/tool_call|>`, want: result{Calls: calls(call(0, "search", nestedC), call(1, "search", `{"q":"東京 🌍"}`))}},
		{name: "unterminated valid call", in: `<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]`, want: result{Calls: calls(w)}},
		{name: "think is content", in: "<think>x</think>", want: result{Content: "<think>x</think>"}},
	}
}

func thinkCases() []tcase {
	return []tcase{
		{name: "plain", in: "Hi there", want: result{Content: "Hi there"}},
		{name: "reasoning then answer", in: "<think>\nA\n</think>\n\nB", want: result{Reasoning: "A", Content: "B"}},
		{name: "prompt opened think", opts: Options{StartInReasoning: true}, in: "A\n</think>\nB", want: result{Reasoning: "A", Content: "B"}},
		{name: "truncated reasoning", opts: Options{StartInReasoning: true}, in: "A still thinking </thi", want: result{Reasoning: "A still thinking </thi"}},
		{name: "tool tags are content", noTag: true, in: wCall, want: result{Content: wCall}},
	}
}

func harmonyCases() []tcase {
	const (
		analysis = "<|channel|>analysis<|message|>Need the weather.<|end|>"
		callHead = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
		bad      = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": }<|call|>"
	)
	long := strings.Repeat("plain words, no format. ", 12)
	return []tcase{
		{name: "analysis then final", in: "<|channel|>analysis<|message|>Let me think.\n2+2<|end|><|start|>assistant<|channel|>final<|message|>The answer is 4.",
			want: result{Reasoning: "Let me think.\n2+2", Content: "The answer is 4."}},
		{name: "return kept out", in: "<|channel|>final<|message|> Hi there.\n<|return|>", want: result{Content: " Hi there.\n"}},
		{name: "call after analysis", in: analysis + callHead + `{"city": "Paris"}<|call|>`,
			want: result{Reasoning: "Need the weather.", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "recipient in the role, stopped at call", in: ` to=functions.search<|channel|>commentary json<|message|>{"q":"rain","n":3}`,
			want: result{Calls: calls(call(0, "search", `{"q":"rain","n":3}`))}},
		{name: "preamble then call", in: "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|><|call|>",
			want: result{Content: "Let me check.", Calls: calls(call(0, "get_weather", `{}`))}},
		{name: "two calls", in: callHead + `{"city":"Oslo"}<|call|>` + callHead + `{"city":"Rome"}`,
			want: result{Calls: calls(call(0, "get_weather", `{"city":"Oslo"}`), call(1, "get_weather", `{"city":"Rome"}`))}},
		{name: "malformed arguments", noTag: true, in: bad, want: result{Content: bad}},
		{name: "malformed arguments error", err: true, opts: Options{ErrorOnMalformed: true}, in: analysis + bad, want: result{Reasoning: "Need the weather."}},
		{name: "undeclared tool", in: "<|channel|>commentary to=functions.launch <|constrain|>json<|message|>{}", want: result{Calls: calls(call(0, "launch", `{}`))}},
		{name: "built-in tool", in: "<|channel|>analysis to=browser.search code<|message|>{\"query\": \"x\"}<|call|>", want: result{Calls: calls(call(0, "browser.search", `{"query":"x"}`))}},
		{name: "two analysis messages", in: "<|channel|>analysis<|message|>First.<|end|><|start|>assistant<|channel|>analysis<|message|>Second.<|end|><|start|>assistant<|channel|>final<|message|>Done",
			want: result{Reasoning: "First.\n\nSecond.", Content: "Done"}},
		{name: "no format", in: "Hello world", want: result{Content: "Hello world"}},
		{name: "long text without a header", in: long + "<|end|>tail", noTag: true, want: result{Content: long + "tail"}},
		{name: "unicode", in: "<|channel|>analysis<|message|>ça 日本<|end|><|channel|>final<|message|>café 😀 <| x |>", want: result{Reasoning: "ça 日本", Content: "café 😀 <| x |>"}},
		{name: "stray markers in a body", in: "<|channel|>final<|message|>a<|message|>b<|constrain|>c", want: result{Content: "abc"}},
		{name: "unfinished reasoning", in: "<|channel|>analysis<|message|>Still thinking", want: result{Reasoning: "Still thinking"}},
		{name: "unfinished header dropped", in: "<|channel|>final<|message|>Hi<|end|><|start|>assistant<|channel|>fin", want: result{Content: "Hi"}},
	}
}

// gemma4Cases: the thought channel and calls as Gemma 4's template writes
// them (keys bare, strings between <|"|> tokens, None for null).
func gemma4Cases() []tcase {
	const (
		q  = `<|"|>`
		w  = "<|tool_call>call:get_weather{city:" + q + "Paris" + q + "}<tool_call|>"
		w2 = "<|tool_call>call:search{n:3,q:" + q + "rain" + q + "}<tool_call|>"
	)
	nestedG := "{filter:{range:{max:[2,3.5,{x:None}],min:1},tags:[" + q + "a" + q + "," + q + "b}" + q + "]},q:" + q + "x}y{\"z" + q + "}"
	return []tcase{
		{name: "plain", in: "Hello, world!\nSecond line.", want: result{Content: "Hello, world!\nSecond line."}},
		{name: "lt not a tag", in: "a < b <|chan <tool_call x", want: result{Content: "a < b <|chan <tool_call x"}},
		{name: "thought then answer", in: "<|channel>thought\nLet me think.\nStep 2.<channel|>The answer is 4.", want: result{Reasoning: "Let me think.\nStep 2.", Content: "The answer is 4."}},
		{name: "empty thought", in: "<|channel>thought\n<channel|>Hi", want: result{Content: "Hi"}},
		{name: "one call", in: w, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "ended by tool_response", in: w + "<|tool_response>", want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "several calls", in: w + w2, want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`), call(1, "search", `{"n":3,"q":"rain"}`))}},
		{name: "two calls in one block", in: "<|tool_call>call:get_weather{city:" + q + "Paris" + q + "}call:search{}<tool_call|>", want: result{Calls: calls(call(0, "get_weather", `{"city":"Paris"}`), call(1, "search", `{}`))}},
		{name: "calls after thought", in: "<|channel>thought\nNeed weather.<channel|>" + w + w2 + "<|tool_response>",
			want: result{Reasoning: "Need weather.", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`), call(1, "search", `{"n":3,"q":"rain"}`))}},
		{name: "text before call", in: "Let me check.\n\n" + w, want: result{Content: "Let me check.", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "text after call", in: w + "\nDone.", want: result{Content: "Done.", Calls: calls(call(0, "get_weather", `{"city":"Paris"}`))}},
		{name: "nested arguments", in: "<|tool_call>call:search" + nestedG + "<tool_call|>", want: result{Calls: calls(call(0, "search", `{"filter":{"range":{"max":[2,3.5,{"x":null}],"min":1},"tags":["a","b}"]},"q":"x}y{\"z"}`))}},
		{name: "values", in: "<|tool_call>call:search{a:true,b:false,c:null,d:-1.5e+22,e:[],f:{},g:" + q + q + "," + q + "h k" + q + ":0}<tool_call|>",
			want: result{Calls: calls(call(0, "search", `{"a":true,"b":false,"c":null,"d":-1.5e+22,"e":[],"f":{},"g":"","h k":0}`))}},
		{name: "close tag inside a string argument", in: "<|tool_call>call:search{q:" + q + "a <tool_call|> \" b" + q + "}<tool_call|>after",
			want: result{Content: "after", Calls: calls(call(0, "search", `{"q":"a <tool_call|> \" b"}`))}},
		{name: "unicode", in: "<|channel>thought\nGröße 🌍<channel|>日本語 🎉<|tool_call>call:search{q:" + q + "Zürich 東京 🌍" + q + "}<tool_call|>",
			want: result{Reasoning: "Größe 🌍", Content: "日本語 🎉", Calls: calls(call(0, "search", `{"q":"Zürich 東京 🌍"}`))}},
		{name: "undeclared tool", in: "<|tool_call>call:launch{}<tool_call|>", want: result{Calls: calls(call(0, "launch", `{}`))}},
		{name: "malformed", noTag: true, in: "Hi<|tool_call>call:search{q:rain}<tool_call|>", want: result{Content: "Hi<|tool_call>call:search{q:rain}<tool_call|>"}},
		{name: "malformed error", err: true, opts: Options{ErrorOnMalformed: true}, in: "Hi<|tool_call>call:search{q:" + q + "x}<tool_call|>", want: result{Content: "Hi"}},
		{name: "unterminated valid call", in: "<|tool_call>call:search{q:" + q + "x" + q + "}", want: result{Calls: calls(call(0, "search", `{"q":"x"}`))}},
		{name: "truncated call", noTag: true, in: "<|tool_call>call:sea", want: result{Content: "<|tool_call>call:sea"}},
		{name: "unfinished thought", in: "<|channel>thought\nStill", want: result{Reasoning: "Still"}},
		{name: "partial tag at end", noTag: true, in: "Done <|tool_ca", want: result{Content: "Done <|tool_ca"}},
	}
}

func gemma4ThinkCases() []tcase {
	return []tcase{
		{name: "thought then answer", in: "<|channel>thought\nA<channel|>B", want: result{Reasoning: "A", Content: "B"}},
		{name: "calls are content", noTag: true, in: "<|tool_call>call:search{}<tool_call|>", want: result{Content: "<|tool_call>call:search{}<tool_call|>"}},
	}
}

func noneCases() []tcase {
	return []tcase{
		{name: "everything is content", noTag: true, in: "  <think>x</think>\n" + wCall + " \n", opts: Options{StartInReasoning: true, Tools: tools}, want: result{Content: "  <think>x</think>\n" + wCall + " \n"}},
	}
}

var allCases = map[string][]tcase{
	Qwen3: hermesCases(), Hermes: hermesCases(), Qwen3Coder: coderCases(), Llama3JSON: llamaCases(),
	Mistral: mistralCases(), MistralArgs: mistralCases(), DeepSeekV3: deepseekCases(), Think: thinkCases(), None: noneCases(), Passthrough: noneCases(),
	Harmony: harmonyCases(), Gemma4: gemma4Cases(), Gemma4Think: gemma4ThinkCases(),
	GLM45: glmCases(), Phi4Mini: phi4Cases(),
}

// run feeds chunks to a fresh parser and checks per-output invariants.
func run(t *testing.T, family string, tc tcase, chunks []string) (result, error) {
	t.Helper()
	opts := tc.opts
	if opts.Tools == nil && family != Llama3JSON {
		opts.Tools = tools
	}
	n := 0
	opts.NewID = func() string { n++; return fmt.Sprintf("call_%d", n-1) }
	p, err := New(family, opts)
	if err != nil {
		t.Fatal(err)
	}
	var r result
	frags := map[int]string{}
	seen := map[int]ToolCallDelta{}
	check := func(o Output) {
		for _, s := range []string{o.Content, o.Reasoning} {
			if !utf8.ValidString(s) {
				t.Fatalf("invalid UTF-8 emitted: %q", s)
			}
			if !tc.noTag {
				for _, tag := range familyTags[family] {
					if strings.Contains(s, tag) {
						t.Fatalf("emitted %q contains tag %q", s, tag)
					}
				}
			}
		}
		r.Content += o.Content
		r.Reasoning += o.Reasoning
		r.Calls = append(r.Calls, o.Calls...)
		for _, d := range o.CallDeltas {
			if _, ok := seen[d.Index]; !ok {
				if d.ID == "" || d.Name == "" {
					t.Fatalf("first delta of %d lacks id/name: %+v", d.Index, d)
				}
				seen[d.Index] = d
			} else if d.ID != "" || d.Name != "" {
				t.Fatalf("repeated id/name in delta %+v", d)
			}
			frags[d.Index] += d.ArgumentsFragment
		}
	}
	for _, c := range chunks {
		check(p.Add(c))
	}
	o, ferr := p.Finish()
	check(o)
	// A streamed call that broke keeps its announced index; otherwise every
	// announced index is a call.
	if len(seen) != len(r.Calls) && !(opts.StreamArguments && ferr != nil) {
		t.Fatalf("%d delta indexes for %d calls", len(seen), len(r.Calls))
	}
	for _, c := range r.Calls {
		d := seen[c.Index]
		if d.ID != c.ID || d.Name != c.Name || frags[c.Index] != c.Arguments {
			t.Fatalf("deltas %+v / %q disagree with call %+v", d, frags[c.Index], c)
		}
	}
	return r, ferr
}

func TestFamilies(t *testing.T) { testFamilies(t, false) }

// TestFamiliesStreaming repeats every case with argument streaming on: the
// results, and the deltas' concatenation, must not change.
func TestFamiliesStreaming(t *testing.T) { testFamilies(t, true) }

func testFamilies(t *testing.T, stream bool) {
	total := 0
	for family, cases := range allCases {
		for _, tc := range cases {
			if stream && tc.streamWant != nil {
				tc.want, tc.err = *tc.streamWant, true
			}
			tc.opts.StreamArguments = stream
			total++
			t.Run(family+"/"+tc.name, func(t *testing.T) {
				check := func(mode string, chunks []string) {
					t.Helper()
					got, err := run(t, family, tc, chunks)
					if (err != nil) != tc.err {
						t.Fatalf("%s: err = %v, want error %v", mode, err, tc.err)
					}
					if err != nil && !errors.Is(err, ErrMalformedToolCall) {
						t.Fatalf("%s: err %v does not wrap ErrMalformedToolCall", mode, err)
					}
					if !reflect.DeepEqual(got, tc.want) {
						t.Fatalf("%s:\n got %#v\nwant %#v", mode, got, tc.want)
					}
				}
				check("whole", []string{tc.in})
				for i := 0; i <= len(tc.in); i++ {
					check(fmt.Sprintf("split@%d", i), []string{tc.in[:i], tc.in[i:]})
				}
				bytes := make([]string, len(tc.in))
				for i := 0; i < len(tc.in); i++ {
					bytes[i] = tc.in[i : i+1]
				}
				check("bytewise", bytes)
			})
		}
	}
	t.Logf("%d cases", total)
}

func TestDetect(t *testing.T) {
	for _, c := range []struct{ tmpl, override, want string }{
		{`{%- if tools %}<tools>{{ tool | tojson }}</tools> <tool_call>\n{"name": {{ tool_call.name }}, "arguments": {{ tool_call.arguments | tojson }}}</tool_call>{% endif %}<think>`, "", Qwen3},
		{`<tool_call>\n{{ tool_call.name }} {{ tool_call.arguments }}</tool_call>`, "", Hermes},
		{`<tool_call>\n<function={{ tool_call.name }}>\n<parameter=`, "", Qwen3Coder},
		{`<|start_header_id|>user<|end_header_id|>\n\nRespond in the format {"name": function name, "parameters": dictionary of argument name and its value}`, "", Llama3JSON},
		{`{{- "<|python_tag|>" + tool_call.name }}`, "", Llama3JSON},
		{`[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS] [TOOL_CALLS]`, "", Mistral},
		{`[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS] [TOOL_CALLS]{{ name }}[ARGS]{{ args }}`, "", MistralArgs},
		{`{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'}}`, "", DeepSeekV3},
		{`{{ '<think>\n' }}`, "", Think},
		{`{{ message.content }}`, "", None},
		{`<tool_call>`, "json_tools", Hermes},
		{`<tool_call>`, "qwen3_xml", Qwen3Coder},
		{``, "Mistral", Mistral},
		{chattemplate.Harmony, "", Harmony},
		{`{{- "<|start|>assistant<|channel|>final<|message|>" + message.content }}<think>`, "", Harmony},
		{``, "openai_gptoss", Harmony},
		{``, "gpt_oss", Harmony},
		{`{{- '<|tool_call>call:' + function['name'] + '{' -}} {{- '<|channel>thought\n<channel|>' -}}`, "", Gemma4},
		{``, "gemma4_text", Gemma4},
		{"<tool_call>{{ tc.name }}\n<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value><think>", "", GLM45},
		{``, "glm4_moe", GLM45},
		{`{{ '<|tool_call|>' + message.tool_calls | tojson + '<|/tool_call|>' }}`, "", Phi4Mini},
		{``, "phi4", Phi4Mini},
	} {
		if got := Detect(c.tmpl, c.override); got != c.want {
			t.Errorf("Detect(%q, %q) = %q, want %q", c.tmpl, c.override, got, c.want)
		}
		if _, err := New(Detect(c.tmpl, c.override), Options{}); err != nil {
			t.Error(err)
		}
	}
	if _, err := New("bogus", Options{}); err == nil {
		t.Error("New(bogus) succeeded")
	}
}

func TestStartInReasoning(t *testing.T) {
	for in, want := range map[string]bool{
		"<|im_start|>assistant\n<think>\n":                              true,
		"<|im_start|>assistant\n<think>\n\n</think>\n\n":                false,
		"<think>a</think> x <|im_start|>assistant\n":                    false,
		"<think>a</think><|Assistant|><think>\n":                        true,
		"[SYSTEM_PROMPT][THINK]x[/THINK][/SYSTEM_PROMPT][INST]q[/INST]": false,
		"[INST]q[/INST][THINK]":                                         true,
		"plain":                                                         false,
	} {
		if got := StartInReasoning(in); got != want {
			t.Errorf("StartInReasoning(%q) = %v", in, got)
		}
	}
}

func TestCallIDs(t *testing.T) {
	id := NewCallID()
	if len(id) != len("call_")+24 || !strings.HasPrefix(id, "call_") || id == NewCallID() {
		t.Fatalf("bad id %q", id)
	}
	p, _ := New(Qwen3, Options{Tools: tools})
	o := p.Add(wCall)
	if len(o.Calls) != 1 || !strings.HasPrefix(o.Calls[0].ID, "call_") || o.Calls[0].Undeclared {
		t.Fatalf("%+v", o)
	}
}

func TestDetectRealTemplates(t *testing.T) {
	for fixture, want := range map[string]string{"qwen3": Qwen3, "llama3_1": None /* this fixture's template has no tools */, "llama3_2": Llama3JSON, "deepseek_v3": DeepSeekV3} {
		dir := testenv.TokenizerDir(t, fixture)
		raw, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		var tmpl string
		if json.Unmarshal(cfg.ChatTemplate, &tmpl) != nil {
			var named []struct{ Template string }
			if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
				t.Fatal(err)
			}
			for _, n := range named {
				tmpl += n.Template
			}
		}
		if got := Detect(tmpl, ""); got != want {
			t.Errorf("%s: Detect = %q, want %q", fixture, got, want)
		}
	}
}

// TestRealTemplateCalls renders tool calls with the real chat templates
// of the families whose calls are not JSON lists (Gemma 4's, Qwen3.5's
// XML, GLM-4.6's key/value pairs, Mistral Small 3.2's and Ministral 3
// Reasoning's NAME[ARGS], the latter after a [THINK] block) and parses the assistant turn back: the
// arguments must come back equal (as JSON values) to those rendered,
// strings with quotes, braces, markers and newlines included. (Qwen3.5's
// template writes a top-level bool or null with str(), True/None, so its
// rows hold none.)
func TestRealTemplateCalls(t *testing.T) {
	shared := []string{
		`{"city": "Paris", "days": 3}`,
		`{"Zeta": [1, "two", {"k": false}], "alpha": {"nested": {"deep": [[], {}]}, "E": 1e-07}, "城市": "東京 🌍"}`,
		`{}`,
	}
	for _, tc := range []struct {
		fixture, family string
		// turn is the marker the assistant turn starts after, end what
		// the template ends it with.
		turn, end string
		bos, eos  string
		args      []string
		// think, when set, is a thinking block the assistant turn opens
		// with (Ministral 3 Reasoning's [THINK]…[/THINK]), read back as
		// the reasoning.
		think string
	}{
		{"gemma4", Gemma4, "<|turn>model\n", "", "<bos>", "", append(shared,
			`{"q": "a \"quoted\" {brace} [list] <tool_call|> x,y:z\nline", "n": -1.5, "ok": true, "none": null}`), ""},
		{"qwen3_5", Qwen3Coder, "<|im_start|>assistant\n", "<|im_end|>\n", "", "", append(shared,
			`{"q": "a \"quoted\" {brace} [list] </parameter x,y:z\nline\n", "n": -1.5, "list": [true, null]}`), ""},
		{"glm4_5", GLM45, "<|assistant|>", "", "", "", append(shared,
			`{"q": "a \"quoted\" {brace} [list] </arg_key> x,y:z\nline\n", "n": -1.5, "ok": true, "none": null}`), ""},
		{"mistral_small3", MistralArgs, "[/INST]", "</s>", "<s>", "</s>", append(shared,
			`{"q": "a \"quoted\" {brace} [list] [TOOL_CALLS] x[ARGS]y\nline\n", "n": -1.5, "ok": true, "none": null}`), ""},
		{"ministral3_reasoning", MistralArgs, "[/INST]", "</s>", "<s>", "</s>", append(shared,
			`{"q": "a \"quoted\" {brace} [list] [/THINK] x[ARGS]y\nline\n", "n": -1.5, "ok": true, "none": null}`),
			"The user wants rain: [1, 2] {x}.\nCall search."},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			src, err := chattemplate.FromTokenizerConfig(testenv.TokenizerFileDir(t, tc.fixture, "chat_template.jinja"))
			if err != nil {
				t.Fatal(err)
			}
			if got := Detect(src, ""); got != tc.family {
				t.Fatalf("Detect = %q, want %q", got, tc.family)
			}
			tmpl, err := chattemplate.New(src)
			if err != nil {
				t.Fatal(err)
			}
			var callObjs []any
			for i, a := range tc.args {
				var args chattemplate.Object
				if err := json.Unmarshal([]byte(a), &args); err != nil {
					t.Fatal(err)
				}
				callObjs = append(callObjs, chattemplate.NewObject("id", fmt.Sprintf("c%08d", i), "type", "function",
					"function", chattemplate.NewObject("name", "search", "arguments", &args)))
			}
			var content any = ""
			if tc.think != "" {
				content = []any{chattemplate.NewObject("type", "thinking", "thinking", tc.think)}
			}
			out, err := tmpl.Render(chattemplate.Input{Messages: []*chattemplate.Object{
				chattemplate.NewObject("role", "user", "content", "hi"),
				chattemplate.NewObject("role", "assistant", "content", content, "tool_calls", callObjs),
			}, BOSToken: tc.bos, EOSToken: tc.eos})
			if err != nil {
				t.Fatal(err)
			}
			turn := strings.TrimSuffix(out[strings.LastIndex(out, tc.turn)+len(tc.turn):], tc.end)
			for _, chunked := range []bool{false, true} {
				got, err := run(t, tc.family, tcase{noTag: false}, chunksOf(turn, chunked))
				if err != nil {
					t.Fatal(err)
				}
				if got.Content != "" || got.Reasoning != tc.think || len(got.Calls) != len(tc.args) {
					t.Fatalf("rendered %q parsed as %+v", turn, got)
				}
				for i, c := range got.Calls {
					var want, have any
					_ = json.Unmarshal([]byte(tc.args[i]), &want)
					if err := json.Unmarshal([]byte(c.Arguments), &have); err != nil || !reflect.DeepEqual(have, want) || c.Name != "search" {
						t.Errorf("call %d: %s %s, want %s (rendered %q)", i, c.Name, c.Arguments, tc.args[i], turn)
					}
				}
			}
		})
	}
}

// chunksOf is s whole, or one byte at a time.
func chunksOf(s string, bytewise bool) []string {
	if !bytewise {
		return []string{s}
	}
	out := make([]string, len(s))
	for i := range len(s) {
		out[i] = s[i : i+1]
	}
	return out
}

func TestMarkers(t *testing.T) {
	for _, n := range Names() {
		for _, m := range Markers(n) {
			if m == "" {
				t.Errorf("%s: empty marker", n)
			}
		}
	}
	if len(Markers(DeepSeekV3)) != 7 || len(Markers(None)) != 0 {
		t.Error("markers")
	}
}

// A long call fed in token-sized chunks must stay cheap (no quadratic
// blow-up that matters at realistic sizes).
func BenchmarkLongCall(b *testing.B)          { benchLongCall(b, false) }
func BenchmarkLongCallStreaming(b *testing.B) { benchLongCall(b, true) }

func benchLongCall(b *testing.B, stream bool) {
	args := `{"code": "` + strings.Repeat(`print(\"hello\")\n`, 1500) + `"}`
	in := "<think>\n" + strings.Repeat("thinking ", 2000) + "\n</think>\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": " + args + "}\n</tool_call>"
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		p, _ := New(Qwen3, Options{Tools: tools, StreamArguments: stream})
		for i := 0; i < len(in); i += 4 {
			p.Add(in[i:min(i+4, len(in))])
		}
		if o, err := p.Finish(); err != nil || o.Content != "" {
			b.Fatal(err, o.Content)
		}
	}
}

// TestStreamIncremental: with StreamArguments the header goes out before the
// call is complete and arguments arrive in several fragments.
func TestStreamIncremental(t *testing.T) {
	for _, c := range []struct{ family, in, args string }{
		{Qwen3, wCall2, `{"q":"rain","n":3}`},
		{Llama3JSON, `{"name": "search", "parameters": {"q": "Zürich 🌍", "n": [1, {"a": 2}]}}`, `{"q":"Zürich 🌍","n":[1,{"a":2}]}`},
		{Qwen3Coder, "<tool_call>\n<function=search>\n<parameter=q>\nrain\n</parameter>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>", `{"q":"rain","n":3}`},
	} {
		p, _ := New(c.family, Options{Tools: tools, StreamArguments: true})
		var frags []string
		header := -1
		for i := 0; i < len(c.in); i++ {
			o := p.Add(c.in[i : i+1])
			for _, d := range o.CallDeltas {
				if d.Name != "" && header < 0 {
					header = i
				}
				if d.ArgumentsFragment != "" {
					if !utf8.ValidString(d.ArgumentsFragment) {
						t.Errorf("%s: invalid UTF-8 fragment %q", c.family, d.ArgumentsFragment)
					}
					frags = append(frags, d.ArgumentsFragment)
				}
			}
		}
		if _, err := p.Finish(); err != nil {
			t.Fatal(err)
		}
		if header < 0 || header > len(c.in)-20 || len(frags) < 3 || strings.Join(frags, "") != c.args {
			t.Errorf("%s: header at %d of %d, fragments %q", c.family, header, len(c.in), frags)
		}
	}
}

// TestStreamMalformed: a call that breaks after streaming began is dropped
// (its header and fragments are already out) and Finish reports it.
func TestStreamMalformed(t *testing.T) {
	in := "Hi\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>\nBye"
	for _, chunk := range []int{1, 7, len(in)} {
		p, _ := New(Qwen3, Options{Tools: tools, StreamArguments: true})
		var content string
		var deltas, calls int
		for i := 0; i < len(in); i += chunk {
			o := p.Add(in[i:min(i+chunk, len(in))])
			content += o.Content
			deltas += len(o.CallDeltas)
			calls += len(o.Calls)
		}
		o, err := p.Finish()
		content += o.Content
		if !errors.Is(err, ErrMalformedToolCall) || content != "HiBye" || calls != 0 {
			t.Errorf("chunk %d: content %q, %d calls, err %v", chunk, content, calls, err)
		}
		if deltas == 0 {
			t.Errorf("chunk %d: nothing was streamed", chunk)
		}
	}
}

func TestHoldBack(t *testing.T) {
	p, _ := New(Qwen3, Options{Tools: tools})
	steps := []struct{ in, content string }{
		{"Hello <tool_", "Hello"},
		{"x> and <", " <tool_x> and"},
		{"/b", " </b"},
		{"<th", ""},
		{"ink>", ""},
	}
	for _, s := range steps {
		if o := p.Add(s.in); o.Content != s.content {
			t.Fatalf("Add(%q).Content = %q, want %q", s.in, o.Content, s.content)
		}
	}
	if o := p.Add("deep\n</think>\n\nok"); o.Reasoning != "deep" || o.Content != "ok" {
		t.Fatalf("%+v", o)
	}
}

// collect feeds chunks and returns the concatenated result.
func collect(family string, opts Options, chunks []string) (result, bool) {
	n := 0
	opts.NewID = func() string { n++; return fmt.Sprintf("call_%d", n-1) }
	p, err := New(family, opts)
	if err != nil {
		panic(err)
	}
	var r result
	valid := true
	add := func(o Output) {
		valid = valid && utf8.ValidString(o.Content) && utf8.ValidString(o.Reasoning)
		r.Content += o.Content
		r.Reasoning += o.Reasoning
		r.Calls = append(r.Calls, o.Calls...)
	}
	for _, c := range chunks {
		add(p.Add(c))
	}
	o, _ := p.Finish()
	add(o)
	return r, valid
}

// FuzzChunking: for any text and any family, feeding it whole, byte by byte
// or in two pieces gives the same result, and valid UTF-8 stays valid.
func FuzzChunking(f *testing.F) {
	for _, cases := range allCases {
		for _, tc := range cases {
			f.Add(tc.in, uint(len(tc.in)/2), false)
		}
	}
	f.Fuzz(func(t *testing.T, in string, cut uint, stream bool) {
		cut %= uint(len(in) + 1)
		for _, family := range Names() {
			opts := Options{Tools: tools, StreamArguments: stream, StartInReasoning: cut%2 == 1}
			whole, valid := collect(family, opts, []string{in})
			bytes := make([]string, len(in))
			for i := 0; i < len(in); i++ {
				bytes[i] = in[i : i+1]
			}
			for _, chunks := range [][]string{bytes, {in[:cut], in[cut:]}} {
				got, v := collect(family, opts, chunks)
				if !reflect.DeepEqual(got, whole) {
					t.Fatalf("%s: chunked %q\n got %#v\nwant %#v", family, chunks, got, whole)
				}
				valid = valid && v
			}
			if utf8.ValidString(in) && !valid {
				t.Fatalf("%s: invalid UTF-8 emitted for %q", family, in)
			}
		}
	})
}

func TestHarmonyOpenHeader(t *testing.T) {
	for prompt, want := range map[string]string{
		"<|start|>user<|message|>hi<|end|><|start|>assistant":                                "",
		"<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>final<|message|>":     "<|start|>assistant<|channel|>final<|message|>",
		"<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>final<|message|>Once": "<|start|>assistant<|channel|>final<|message|>",
		"<|start|>assistant<|channel|>analysis<|message|>x<|end|>":                           "",
		"<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>":   "",
		"no harmony here": "",
	} {
		if got := HarmonyOpenHeader(prompt); got != want {
			t.Errorf("HarmonyOpenHeader(%q) = %q, want %q", prompt, got, want)
		}
	}
	// Fed first, the header makes the output that message's body.
	p, _ := New(Harmony, Options{})
	if o := p.Add("<|start|>assistant<|channel|>analysis<|message|>"); !o.Empty() {
		t.Fatalf("the header alone gave %+v", o)
	}
	o := p.Add("Thinking.<|end|><|start|>assistant<|channel|>final<|message|>Done")
	f, _ := p.Finish()
	if o.Reasoning != "Thinking." || o.Content+f.Content != "Done" {
		t.Errorf("got %+v then %+v", o, f)
	}
}
