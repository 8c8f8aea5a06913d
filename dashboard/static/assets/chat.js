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
  const thinking = h('select', { name: 'thinking' }, h('option', { value: '' }, 'model default'),
    h('option', { value: 'on' }, 'on'), h('option', { value: 'off' }, 'off'));
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
      field('Temperature', temperature), field('Max tokens', maxTokens), field('Thinking', thinking)),
    h('section', { 'aria-label': 'Conversation' }, msgs, form)));

  api('GET', '/v1/models').then((doc) => {
    const ids = (doc.data || []).map((m) => m.id);
    model.replaceChildren(...ids.map((id) => h('option', { value: id }, id)));
    if (ids.includes(chosen)) model.value = chosen;
  }).catch((e) => { err.textContent = e.message; });
  model.addEventListener('change', () => { chosen = model.value; });

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
    input.value = '';
    history.push({ role: 'user', content });
    bubble('user', content);
    const b = bubble('assistant', '');
    b.el.setAttribute('aria-busy', 'true');
    const reasoning = h('div', { class: 'reasoning' });
    const details = h('details', { open: true, hidden: true }, h('summary', {}, 'Reasoning'), reasoning);
    b.el.insertBefore(details, b.text);
    const tools = h('div', {});
    const usage = h('div', { class: 'usage' });
    b.el.append(tools, usage);

    const body = { model: model.value, stream: true, stream_options: { include_usage: true }, messages: [] };
    if (system.value.trim()) body.messages.push({ role: 'system', content: system.value.trim() });
    body.messages.push(...history);
    if (temperature.value.trim() !== '') body.temperature = Number(temperature.value);
    if (maxTokens.value.trim() !== '') body.max_tokens = Number(maxTokens.value);
    if (thinking.value) body.enable_thinking = thinking.value === 'on';

    ctrl = new AbortController();
    send.disabled = true;
    stopB.disabled = false;
    const started = performance.now();
    let first = 0, answer = '', stopped = false;
    const calls = {};
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
            const cur = calls[tc.index] || (calls[tc.index] = { name: '', args: '', el: h('pre', {}) });
            if (!cur.el.isConnected) tools.append(h('div', { class: 'who' }, 'tool call'), cur.el);
            if (tc.function && tc.function.name) cur.name += tc.function.name;
            if (tc.function && tc.function.arguments) cur.args += tc.function.arguments;
            cur.el.textContent = `${cur.name}(${cur.args})`;
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
