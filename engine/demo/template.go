package demo

import (
	"fmt"
	"os"
	"strings"

	"fusion/engine/chattemplate"
	"fusion/engine/modelfile"
)

// The built-in tokenizer's chat templates are ChatML in the style of
// Qwen's: an optional system turn that lists the tools inside
// <tools></tools>, user/assistant turns, assistant tool calls, tool
// results grouped into a user turn as <tool_response> blocks, reasoning
// dropped from earlier assistant turns. chatTemplate is Qwen3's kind:
// calls as <tool_call> JSON, and a generation prompt that closes an
// empty <think> block when enable_thinking is false. qwen35Template is
// Qwen3.5's kind (the qwen3_5 and qwen3_5_moe demos): calls as
// <function=NAME><parameter=KEY>VALUE</parameter></function> (a string
// value as it is, others as JSON), and a generation prompt that opens
// <think> unless enable_thinking is false, when it closes an empty one.
// Both are ours (the instructions' wording too); a real model's template
// replaces them through Options.TemplateFrom.
var (
	chatTemplate   = chatML(jsonToolsText, jsonCall, "")
	qwen35Template = chatML(xmlToolsText, xmlCall, "<think>\\n")
)

// builtinTemplate is the template the built-in tokenizer carries for arch.
func builtinTemplate(arch string) string {
	switch arch {
	case modelfile.ArchQwen35, modelfile.ArchQwen35MoE:
		return qwen35Template
	}
	return chatTemplate
}

const (
	jsonToolsText = `# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>`
	xmlToolsText  = `# Tools\n\nThese functions are available, their signatures within <tools></tools> XML tags:\n<tools>`
	jsonToolsEnd  = `\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>`
	xmlToolsEnd   = `\n</tools>\n\nTo call a function, write one block per call, nothing after it:\n<tool_call>\n<function=NAME>\n<parameter=PARAMETER>\nVALUE\n</parameter>\n</function>\n</tool_call>`

	// jsonCall and xmlCall write one call of an assistant turn (tool_call
	// is the function object).
	jsonCall = `
                {{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}`
	xmlCall = `
                {{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}
                {%- if tool_call.arguments is mapping %}
                    {%- for name, value in tool_call.arguments | items %}
                        {{- '<parameter=' + name + '>\n' }}
                        {%- if value is string %}
                            {{- value }}
                        {%- else %}
                            {{- value | tojson }}
                        {%- endif %}
                        {{- '\n</parameter>\n' }}
                    {%- endfor %}
                {%- endif %}
                {{- '</function>\n</tool_call>' }}`
)

// chatML assembles a built-in template: tools is the system turn's tools
// header, call writes one call, and think is what the generation prompt
// opens when enable_thinking is not false ("" for nothing).
func chatML(tools, call, think string) string {
	toolsEnd := jsonToolsEnd
	if tools == xmlToolsText {
		toolsEnd = xmlToolsEnd
	}
	open := ""
	if think != "" {
		open = `
    {%- else %}
        {{- '` + think + `' }}`
	}
	return `{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "` + tools + `" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "` + toolsEnd + `<|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set content = message.content if message.content is string else '' %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\n' + content }}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {%- if not loop.first or content %}
                    {{- '\n' }}
                {%- endif %}` + call + `
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}` + open + `
    {%- endif %}
{%- endif %}
`
}

// readTemplate reads the chat template of Options.TemplateFrom: a
// template file, or a model or tokenizer directory (its default
// template, found as the engine finds it).
func readTemplate(from string) (string, error) {
	st, err := os.Stat(from)
	if err != nil {
		return "", fmt.Errorf("demo: template: %w", err)
	}
	if st.IsDir() {
		src, err := chattemplate.FromTokenizerConfig(from)
		if err != nil {
			return "", fmt.Errorf("demo: template: %w", err)
		}
		return src, nil
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return "", fmt.Errorf("demo: template: %w", err)
	}
	if strings.TrimSpace(string(b)) == "" {
		return "", fmt.Errorf("demo: template: %s is empty", from)
	}
	return string(b), nil
}
