package chattemplate

// Harmony is a chat template for gpt-oss's harmony prompt format, written
// for models that ship without one (the demo models built on gpt-oss's
// tokenizer) and checked against OpenAI's reference renderer
// (openai-harmony) in harmony_test.go. A real gpt-oss checkpoint carries
// its own chat_template.jinja, which the engine renders instead.
//
// What it renders:
//
//   - a system message: the model identity (kwarg model_identity), the
//     knowledge cutoff, the current date (kwarg current_date, else today;
//     "" leaves the line out), the reasoning effort (kwarg
//     reasoning_effort: low, medium — the default — or high), the valid
//     channels, and, with tools, that calls go to the commentary channel;
//   - a developer message when the conversation starts with a system or
//     developer message (its text under "# Instructions") or declares
//     tools (the "functions" namespace as TypeScript types, the way
//     harmony writes them: descriptions as // comments, optional
//     parameters with "?", enums as string unions, defaults after the
//     parameter);
//   - user turns; assistant answers on the final channel; an assistant
//     message with tool calls as its text on the commentary channel (a
//     preamble), then one message per call addressed to functions.NAME in
//     the commentary channel with content type json, ended by <|call|>;
//     tool results from functions.NAME (the call they answer, by
//     tool_call_id, else in order) to the assistant;
//   - reasoning (reasoning_content, or thinking as in Hugging Face's
//     template) on the analysis channel only for the assistant messages
//     with tool calls of the turn still in progress (no later assistant
//     answer), as gpt-oss's own template does: earlier turns' reasoning is
//     dropped;
//   - the generation prompt "<|start|>assistant", where the model writes
//     its own channel.
//
// Call arguments are printed as they are when they are a string (the JSON
// text the model wrote), so the template's Shape is StringArguments.
const Harmony = `{%- macro ts_type(p) -%}
    {%- if p.type == "string" and p.enum is defined -%}
        {{- '"' + p.enum | join('" | "') + '"' -}}
    {%- elif p.type == "string" -%}
        {{- "string" -}}
        {%- if p.nullable -%}{{- " | null" -}}{%- endif -%}
    {%- elif p.type == "number" or p.type == "integer" -%}
        {{- "number" -}}
    {%- elif p.type == "boolean" -%}
        {{- "boolean" -}}
    {%- elif p.type == "array" -%}
        {%- if p["items"] is defined and p["items"].type in ["string", "number", "boolean"] -%}
            {{- p["items"].type + "[]" -}}
        {%- elif p["items"] is defined and p["items"].type == "integer" -%}
            {{- "number[]" -}}
        {%- else -%}
            {{- "Array<any>" -}}
        {%- endif -%}
    {%- else -%}
        {{- "any" -}}
    {%- endif -%}
{%- endmacro -%}
{%- macro comment(text) -%}
    {%- for line in text.split("\n") -%}
        {{- "// " + line + "\n" -}}
    {%- endfor -%}
{%- endmacro -%}
{%- macro functions_namespace(tools) -%}
    {{- "## functions\n\nnamespace functions {\n\n" -}}
    {%- for tool in tools -%}
        {%- set f = tool.function if tool.function is defined else tool -%}
        {%- if f.description -%}
            {{- comment(f.description) -}}
        {%- endif -%}
        {%- if f.parameters is defined and f.parameters is mapping -%}
            {{- "type " + f.name + " = (_: {\n" -}}
            {%- set required = f.parameters.required if f.parameters.required is defined and f.parameters.required else [] -%}
            {%- if f.parameters.properties is defined and f.parameters.properties is mapping -%}
                {%- for name, p in f.parameters.properties.items() -%}
                    {%- if p.description -%}
                        {{- comment(p.description) -}}
                    {%- endif -%}
                    {{- name -}}
                    {%- if name not in required -%}{{- "?" -}}{%- endif -%}
                    {{- ": " + ts_type(p) -}}
                    {%- if p.default is defined -%}
                        {%- if p.enum is defined -%}
                            {{- ", // default: " + p.default | string + "\n" -}}
                        {%- else -%}
                            {{- ", // default: " + p.default | tojson + "\n" -}}
                        {%- endif -%}
                    {%- else -%}
                        {{- ",\n" -}}
                    {%- endif -%}
                {%- endfor -%}
            {%- endif -%}
            {{- "}) => any;\n\n" -}}
        {%- else -%}
            {{- "type " + f.name + " = () => any;\n\n" -}}
        {%- endif -%}
    {%- endfor -%}
    {{- "} // namespace functions" -}}
{%- endmacro -%}
{%- if model_identity is not defined -%}
    {%- set model_identity = "You are ChatGPT, a large language model trained by OpenAI." -%}
{%- endif -%}
{%- if current_date is not defined -%}
    {%- set current_date = strftime_now("%Y-%m-%d") -%}
{%- endif -%}
{%- if reasoning_effort is not defined or not reasoning_effort -%}
    {%- set reasoning_effort = "medium" -%}
{%- endif -%}
{{- "<|start|>system<|message|>" + model_identity + "\nKnowledge cutoff: 2024-06\n" -}}
{%- if current_date -%}
    {{- "Current date: " + current_date + "\n" -}}
{%- endif -%}
{{- "\nReasoning: " + reasoning_effort + "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message." -}}
{%- if tools -%}
    {{- "\nCalls to these tools must go to the commentary channel: 'functions'." -}}
{%- endif -%}
{{- "<|end|>" -}}
{%- if messages and (messages[0].role == "system" or messages[0].role == "developer") -%}
    {%- set instructions = messages[0].content -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set instructions = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- if instructions or tools -%}
    {{- "<|start|>developer<|message|>" -}}
    {%- if instructions -%}
        {{- "# Instructions\n\n" + instructions -}}
        {%- if tools -%}{{- "\n\n" -}}{%- endif -%}
    {%- endif -%}
    {%- if tools -%}
        {{- "# Tools\n\n" + functions_namespace(tools) -}}
    {%- endif -%}
    {{- "<|end|>" -}}
{%- endif -%}
{%- set calls = namespace(ids=[], names=[], next=0) -%}
{%- for message in loop_messages -%}
    {%- if message.role == "user" -%}
        {{- "<|start|>user<|message|>" + message.content + "<|end|>" -}}
    {%- elif message.role == "system" or message.role == "developer" -%}
        {{- "<|start|>" + message.role + "<|message|>" + message.content + "<|end|>" -}}
    {%- elif message.role == "assistant" -%}
        {%- if message.reasoning_content is defined and message.reasoning_content -%}
            {%- set reasoning = message.reasoning_content -%}
        {%- elif message.thinking is defined and message.thinking -%}
            {%- set reasoning = message.thinking -%}
        {%- else -%}
            {%- set reasoning = "" -%}
        {%- endif -%}
        {%- set content = message.content if message.content is string else "" -%}
        {%- if message.tool_calls -%}
            {%- set later = namespace(answer=false) -%}
            {%- for next in loop_messages[loop.index:] -%}
                {%- if next.role == "assistant" and not next.tool_calls -%}
                    {%- set later.answer = true -%}
                {%- endif -%}
            {%- endfor -%}
            {%- if reasoning and not later.answer -%}
                {{- "<|start|>assistant<|channel|>analysis<|message|>" + reasoning + "<|end|>" -}}
            {%- endif -%}
            {%- if content -%}
                {{- "<|start|>assistant<|channel|>commentary<|message|>" + content + "<|end|>" -}}
            {%- endif -%}
            {%- set calls.ids = [] -%}
            {%- set calls.names = [] -%}
            {%- set calls.next = 0 -%}
            {%- for call in message.tool_calls -%}
                {%- set f = call.function if call.function is defined else call -%}
                {%- set calls.ids = calls.ids + [call.id if call.id is defined else ""] -%}
                {%- set calls.names = calls.names + [f.name] -%}
                {{- "<|start|>assistant to=functions." + f.name + "<|channel|>commentary json<|message|>" -}}
                {%- if f.arguments is string -%}
                    {{- f.arguments -}}
                {%- else -%}
                    {{- f.arguments | tojson(separators=(",", ":")) -}}
                {%- endif -%}
                {{- "<|call|>" -}}
            {%- endfor -%}
        {%- else -%}
            {%- if reasoning and loop.last and not add_generation_prompt -%}
                {{- "<|start|>assistant<|channel|>analysis<|message|>" + reasoning + "<|end|>" -}}
            {%- endif -%}
            {{- "<|start|>assistant<|channel|>final<|message|>" + content + "<|end|>" -}}
        {%- endif -%}
    {%- elif message.role == "tool" -%}
        {%- set found = namespace(name="") -%}
        {%- if message.tool_call_id is defined and message.tool_call_id in calls.ids -%}
            {%- for id in calls.ids -%}
                {%- if id == message.tool_call_id and not found.name -%}
                    {%- set found.name = calls.names[loop.index0] -%}
                {%- endif -%}
            {%- endfor -%}
        {%- elif calls.next < calls.names | length -%}
            {%- set found.name = calls.names[calls.next] -%}
        {%- endif -%}
        {%- if not found.name -%}
            {{- raise_exception("a tool message must answer a tool call of the assistant message before it") -}}
        {%- endif -%}
        {%- set calls.next = calls.next + 1 -%}
        {{- "<|start|>functions." + found.name + " to=assistant<|channel|>commentary<|message|>" + message.content + "<|end|>" -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "<|start|>assistant" -}}
{%- endif -%}
`
