// Logs: the last lines of a node's server.log, then its new lines live
// from the SSE stream; level filter, node choice, search, pause.
import { api, request, events } from './api.js';
import { h, field } from './dom.js';

const keep = 1000; // lines kept on the page

export function render(main) {
  const level = h('select', { name: 'level' }, ['debug', 'info', 'warn', 'error'].map((l) => h('option', { value: l, selected: l === 'info' }, l)));
  const node = h('select', { name: 'node' }, h('option', { value: '' }, 'this node'));
  const search = h('input', { name: 'search', type: 'search', placeholder: 'text in the line' });
  const pause = h('button', { type: 'button', class: 'secondary', 'aria-pressed': 'false' }, 'Pause');
  const state = h('p', { role: 'status', class: 'muted' });
  const box = h('div', { class: 'logs', id: 'log-lines', role: 'log', 'aria-label': 'Log lines', tabindex: '0' });
  main.append(h('h1', {}, 'Logs'),
    h('div', { class: 'row' }, field('Level', level), field('Node', node), field('Search', search), pause), state, box);

  let ctrl = null, paused = false, alive = true, retry = 0;
  const held = [];

  api('GET', '/admin/api/cluster').then((c) => {
    for (const m of c.members) if (m.id !== c.self) node.append(h('option', { value: m.id }, m.id));
  }).catch(() => { /* a lone node */ });

  function matches(line) {
    const q = search.value.trim().toLowerCase();
    return !q || line.toLowerCase().includes(q);
  }

  function addLine(line) {
    let lvl = '';
    try { lvl = JSON.parse(line).level || ''; } catch { /* a text line */ }
    const el = h('div', { class: 'lvl-' + lvl }, line);
    el.hidden = !matches(line);
    const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    box.append(el);
    while (box.childElementCount > keep) box.firstElementChild.remove();
    if (atEnd) box.scrollTop = box.scrollHeight;
  }

  async function follow() {
    if (ctrl) ctrl.abort();
    ctrl = new AbortController();
    const my = ctrl;
    const q = new URLSearchParams({ level: level.value });
    if (node.value) q.set('node', node.value);
    box.replaceChildren();
    try {
      const tail = await api('GET', '/admin/api/logs?lines=100&' + q, undefined, { signal: my.signal });
      for (const l of tail.lines || []) addLine(l);
      const resp = await request('GET', '/admin/api/logs/stream?' + q, undefined, { signal: my.signal });
      state.textContent = `Following ${node.value || 'this node'} at ${level.value} and above.`;
      retry = 0;
      await events(resp, (name, data) => {
        if (name !== 'log') return;
        if (paused) { held.push(data); if (held.length > keep) held.shift(); } else addLine(data);
      });
      throw new Error('the stream ended');
    } catch (e) {
      if (e.name === 'AbortError' || !alive || my !== ctrl) return;
      state.textContent = `Log stream interrupted (${e.message}); reconnecting…`;
      retry = Math.min(retry + 1, 5);
      setTimeout(() => { if (alive && my === ctrl) follow(); }, 1000 * retry);
    }
  }

  level.addEventListener('change', follow);
  node.addEventListener('change', follow);
  search.addEventListener('input', () => { for (const el of box.children) el.hidden = !matches(el.textContent); });
  pause.addEventListener('click', () => {
    paused = !paused;
    pause.textContent = paused ? 'Resume' : 'Pause';
    pause.setAttribute('aria-pressed', String(paused));
    if (!paused) for (const l of held.splice(0)) addLine(l);
  });
  follow();
  return () => { alive = false; if (ctrl) ctrl.abort(); };
}
