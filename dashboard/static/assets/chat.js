// Chat: a model, a system prompt and sampling parameters, and answers
// streamed from /v1/chat/completions (SSE read with fetch, so Stop aborts
// the request and the node cancels the generation); reasoning apart and
// collapsible, tool calls as such, usage and tokens/s under each answer.
import { api, request, events } from './api.js';
import { h, field, num } from './dom.js';

const history = []; // the conversation, kept while the panel is open
let chosen = '';

export function render(main) {
  const model = h('select', { name: 'model' });
  const system = h('textarea', { name: 'system', rows: 3 });
  const temperature = h('input', { name: 'temperature', inputmode: 'decimal', placeholder: 'model default' });
  const maxTokens = h('input', { name: 'max_tokens', inputmode: 'numeric', value: '256' });
  const effort = h('select', { name: 'reasoning_effort' }, h('option', { value: '' }, 'model default'),
    ...['none', 'low', 'medium', 'high'].map((e) => h('option', { value: e }, e === 'none' ? 'off' : e)));
  const toolsBox = h('textarea', { name: 'tools', rows: 4, spellcheck: 'false',
    placeholder: '[{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}]' });
  const mcpBox = h('fieldset', { class: 'mcp' }, h('legend', {}, 'MCP servers'), h('p', { class: 'muted' }, 'none configured'));
  const toolChoice = h('select', { name: 'tool_choice' }, ...['auto', 'required', 'none'].map((c) => h('option', { value: c }, c)));
  const force = h('input', { name: 'force_tool', placeholder: 'a function or MCP tool name', autocomplete: 'off' });
  const input = h('textarea', { name: 'message', rows: 3, required: true });
  const send = h('button', { type: 'submit' }, 'Send');
  const stopB = h('button', { type: 'button', class: 'danger', disabled: true }, 'Stop');
  const clear = h('button', { type: 'button', class: 'secondary' }, 'New chat');
  const msgs = h('div', { class: 'msgs', 'aria-live': 'polite', id: 'chat-log' });
  const err = h('p', { class: 'error', role: 'alert' });
  let ctrl = null;

  const form = h('form', { 'aria-label': 'Message' }, field('Message', input), h('div', { class: 'row' }, send, stopB, clear), err);
  main.append(h('h1', {}, 'Chat'), h('div', { class: 'chat' },
    h('section', { 'aria-label': 'Parameters' }, field('Model', model), field('System prompt', system),
      field('Temperature', temperature), field('Max tokens', maxTokens), field('Reasoning effort', effort),
      field('Tools (JSON)', toolsBox), mcpBox, field('Tool choice', toolChoice), field('Force a call of', force)),
    h('section', { 'aria-label': 'Conversation' }, msgs, form)));

  api('GET', '/v1/models').then((doc) => {
    const ids = (doc.data || []).map((m) => m.id);
    model.replaceChildren(...ids.map((id) => h('option', { value: id }, id)));
    if (ids.includes(chosen)) model.value = chosen;
  }).catch((e) => { err.textContent = e.message; });
  model.addEventListener('change', () => { chosen = model.value; });
  // The MCP servers of the node: their tools can be offered to the model,
  // which the node then runs itself (the calls and results show below).
  api('GET', '/v1/mcp/servers').then((doc) => {
    const servers = (doc.servers || []).map((sv) => sv.name);
    if (!servers.length) return;
    mcpBox.replaceChildren(h('legend', {}, 'MCP servers'), ...servers.map((name) =>
      h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'mcp', value: name }), ' ' + name)));
  }).catch(() => { /* no MCP on this node: the box says none */ });

  function bubble(role, content) {
    const text = h('div', { class: 'text' }, content || '');
    const el = h('div', { class: 'msg ' + role }, h('div', { class: 'who' }, role), text);
    msgs.append(el);
    return { el, text };
  }
  for (const m of history) bubble(m.role, m.content);

  clear.addEventListener('click', () => { history.length = 0; msgs.replaceChildren(); });
  stopB.addEventListener('click', () => { if (ctrl) ctrl.abort(); });

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const content = input.value.trim();
    if (!content || ctrl) return;
    err.textContent = '';
    const tools = [];
    if (toolsBox.value.trim()) {
      try {
        const parsed = JSON.parse(toolsBox.value);
        tools.push(...(Array.isArray(parsed) ? parsed : [parsed]));
      } catch (e) {
        err.textContent = 'Tools: not valid JSON (' + e.message + ').';
        return;
      }
    }
    for (const c of mcpBox.querySelectorAll('input[name="mcp"]:checked')) tools.push({ type: 'mcp', server_label: c.value });
    input.value = '';
    history.push({ role: 'user', content });
    bubble('user', content);
    const b = bubble('assistant', '');
    b.el.setAttribute('aria-busy', 'true');
    const reasoning = h('div', { class: 'reasoning' });
    const details = h('details', { open: true, hidden: true }, h('summary', {}, 'Reasoning'), reasoning);
    b.el.insertBefore(details, b.text);
    const toolsEl = h('div', { class: 'tool-calls' });
    const usage = h('div', { class: 'usage' });
    b.el.append(toolsEl, usage);

    const body = { model: model.value, stream: true, stream_options: { include_usage: true }, messages: [] };
    if (system.value.trim()) body.messages.push({ role: 'system', content: system.value.trim() });
    body.messages.push(...history);
    if (temperature.value.trim() !== '') body.temperature = Number(temperature.value);
    if (maxTokens.value.trim() !== '') body.max_tokens = Number(maxTokens.value);
    if (effort.value) body.reasoning_effort = effort.value;
    if (tools.length) {
      body.tools = tools;
      body.tool_choice = force.value.trim() ? { type: 'function', function: { name: force.value.trim() } } : toolChoice.value;
    }
    ctrl = new AbortController();
    send.disabled = true;
    stopB.disabled = false;
    const started = performance.now();
    let first = 0, answer = '', stopped = false;
    const calls = {}, mcpCalls = {};
    try {
      const resp = await request('POST', '/v1/chat/completions', body, { signal: ctrl.signal });
      await events(resp, (_name, data) => {
        if (data === '[DONE]') return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        for (const c of chunk.choices || []) {
          const d = c.delta || {};
          const r = d.reasoning_content || d.reasoning;
          if (r) { details.hidden = false; reasoning.append(r); }
          if (d.content) {
            if (!first) first = performance.now();
            answer += d.content;
            b.text.textContent = answer;
          }
          for (const tc of d.tool_calls || []) {
            const cur = calls[tc.index] || (calls[tc.index] = toolCard(toolsEl, 'tool call'));
            if (tc.function && tc.function.name) cur.name.textContent += tc.function.name;
            if (tc.function && tc.function.arguments) cur.addArgs(tc.function.arguments);
          }
          if (d.mcp_call) {
            const mc = d.mcp_call;
            const cur = mcpCalls[mc.id] || (mcpCalls[mc.id] = toolCard(toolsEl, 'MCP call · ' + mc.server_label));
            cur.name.textContent = mc.name;
            if (!cur.args) cur.addArgs(mc.arguments || '');
            cur.status.textContent = mc.status;
            if (mc.output != null) cur.result.textContent = mc.output;
            if (mc.error != null) cur.result.textContent = 'error: ' + mc.error;
            cur.result.hidden = mc.output == null && mc.error == null;
          }
        }
        if (chunk.usage) {
          const secs = (performance.now() - (first || started)) / 1000;
          const out = chunk.usage.completion_tokens;
          usage.textContent = `${chunk.usage.prompt_tokens} prompt + ${out} completion tokens · ${num(secs > 0 ? out / secs : 0)} tokens/s`;
        }
      });
    } catch (e) {
      if (e.name === 'AbortError') {
        stopped = true;
        usage.textContent = (usage.textContent ? usage.textContent + ' · ' : '') + 'stopped';
      } else {
        err.textContent = e.message;
      }
    }
    details.open = false;
    b.el.removeAttribute('aria-busy');
    b.el.dataset.done = stopped ? 'stopped' : 'complete';
    history.push({ role: 'assistant', content: answer });
    ctrl = null;
    send.disabled = false;
    stopB.disabled = true;
  });

  return () => { if (ctrl) ctrl.abort(); };
}

// toolCard shows one tool call under an answer: its kind (and status),
// the function's name, its JSON arguments (pretty once they parse) and,
// for a call the node ran, the result.
function toolCard(parent, kind) {
  const name = h('div', { class: 'tool-name' });
  const args = h('pre', { class: 'tool-args' });
  const status = h('span', {});
  const result = h('pre', { class: 'tool-result', hidden: true });
  parent.append(h('div', { class: 'tool-call', role: 'group', 'aria-label': kind },
    h('div', { class: 'who' }, kind, ' ', status), name, args, result));
  const cur = {
    name, status, result, args: '',
    addArgs(text) {
      cur.args += text;
      try { args.textContent = JSON.stringify(JSON.parse(cur.args), null, 2); } catch { args.textContent = cur.args; }
    },
  };
  return cur;
}
