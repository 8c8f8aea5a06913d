// Models: every discovered model on any node, load/unload/pin, the
// per-model settings form (the API validates; its 400 is shown) and, in a
// cluster, the model's placement (replicas, pipeline stages).
import { api } from './api.js';
import { h, field, table, bytes } from './dom.js';

const every = 3000; // ms between state polls
const numeric = ['temperature', 'top_p', 'top_k', 'min_p', 'repetition_penalty', 'max_context', 'ttl_seconds'];
const text = ['alias', 'reasoning_parser', 'tool_parser'];
const flags = ['completions_as_chat', 'pinned'];

function stateText(m) {
  return m.loaded_on && m.loaded_on.length ? `${m.state} on ${m.loaded_on.join(', ')}` : m.state;
}

// placementForm sets the cluster setting placement/<model> ({"replicas",
// "stages"}): the leader places the replica groups and re-places them
// when a node fails.
function placementForm(m) {
  const replicas = h('input', { name: 'replicas', inputmode: 'numeric', value: '1' });
  const stages = h('input', { name: 'stages', inputmode: 'numeric', placeholder: 'whole model' });
  const out = h('p', { role: 'status' });
  const form = h('form', { 'aria-label': `Placement of ${m.id}` },
    h('div', { class: 'row' }, field('Replicas (0: none)', replicas), field('Pipeline stages', stages)),
    h('button', { type: 'submit' }, `Place ${m.id}`), out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const spec = { replicas: Number(replicas.value.trim()) };
    if (stages.value.trim() !== '') spec.stages = Number(stages.value.trim());
    const bad = Object.entries(spec).find(([, v]) => !Number.isInteger(v) || v < 0);
    if (bad) {
      out.className = 'error';
      out.textContent = `Refused: ${bad[0]} must be a whole number ≥ 0.`;
      return;
    }
    try {
      await api('PUT', `/admin/api/cluster/settings/placement/${encodeURIComponent(m.id)}`, { value: JSON.stringify(spec) });
      out.className = 'okmsg';
      out.textContent = spec.replicas ? 'Placed: the leader puts it on the nodes (see the dashboard).' : 'Placement removed.';
    } catch (e) {
      out.className = 'error';
      out.textContent = `Refused (${e.status}): ${e.message}`;
    }
  });
  return h('details', {}, h('summary', {}, `Placement of ${m.id}`), form);
}

function settingsForm(m, onSaved) {
  const s = m.settings || {};
  const inputs = {};
  const out = h('p', { role: 'status' });
  const fields = [];
  for (const k of numeric) {
    inputs[k] = h('input', { name: k, inputmode: 'decimal', value: s[k] ?? '' });
    fields.push(field(k, inputs[k]));
  }
  for (const k of text) {
    inputs[k] = h('input', { name: k, value: s[k] ?? '' });
    fields.push(field(k, inputs[k]));
  }
  for (const k of flags) {
    inputs[k] = h('input', { type: 'checkbox', name: k, checked: !!s[k] });
    fields.push(h('div', {}, h('label', { class: 'inline' }, inputs[k], k)));
  }
  inputs.chat_template = h('textarea', { name: 'chat_template', rows: 3, value: s.chat_template ?? '' });
  const form = h('form', { 'aria-label': `Settings of ${m.id}` },
    h('div', { class: 'row' }, fields), field('chat_template (Jinja, empty: the model\'s own)', inputs.chat_template),
    h('button', { type: 'submit' }, `Save settings of ${m.id}`), out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = {};
    for (const k of numeric) {
      const v = inputs[k].value.trim();
      if (v !== '') body[k] = Number.isNaN(Number(v)) ? v : Number(v); // a non-number goes as typed: the API names it
    }
    for (const k of text) if (inputs[k].value.trim() !== '') body[k] = inputs[k].value.trim();
    for (const k of flags) if (inputs[k].checked) body[k] = true;
    if (inputs.chat_template.value !== '') body.chat_template = inputs.chat_template.value;
    out.className = '';
    out.textContent = 'Saving…';
    try {
      await api('PUT', `/admin/api/models/${encodeURIComponent(m.id)}/settings`, body);
      out.className = 'okmsg';
      out.textContent = 'Saved: in force on every node.';
      onSaved();
    } catch (e) {
      out.className = 'error';
      out.textContent = `Refused (${e.status}): ${e.message}`;
    }
  });
  return h('details', {}, h('summary', {}, `Settings of ${m.id}`), form);
}

export function render(main) {
  const msg = h('p', { role: 'status', id: 'models-msg' });
  const body = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  main.append(h('h1', {}, 'Models'), msg, body);
  let timer = 0, alive = true, clustered = false;
  const cells = new Map(); // id → {state, pin}

  async function act(m, what, node, button) {
    button.disabled = true;
    msg.className = '';
    msg.textContent = `${what === 'load' ? 'Loading' : 'Unloading'} ${m.id}…`;
    const c = cells.get(m.id);
    if (c) c.state.textContent = what === 'load' ? 'loading…' : 'unloading…';
    try {
      await api('POST', `/admin/api/models/${encodeURIComponent(m.id)}/${what}`, node ? { node } : undefined);
      msg.className = 'okmsg';
      msg.textContent = `${m.id} ${what === 'load' ? 'loaded' : 'unloaded'}.`;
    } catch (e) {
      msg.className = 'error';
      msg.textContent = `${what} ${m.id} failed (${e.status}): ${e.message}`;
    }
    button.disabled = false;
    load();
  }

  async function pin(m) {
    try {
      const s = { ...(m.settings || {}) };
      if (m.pinned) delete s.pinned; else s.pinned = true;
      await api('PUT', `/admin/api/models/${encodeURIComponent(m.id)}/settings`, s);
      msg.className = 'okmsg';
      msg.textContent = `${m.id} ${m.pinned ? 'unpinned' : 'pinned'}.`;
    } catch (e) {
      msg.className = 'error';
      msg.textContent = `pin ${m.id} failed (${e.status}): ${e.message}`;
    }
    load();
  }

  function draw(list) {
    cells.clear();
    const rows = list.map((m) => {
      const nodeSel = h('select', { 'aria-label': `Node to load ${m.id} on` },
        h('option', { value: '' }, 'placement decides'), (m.nodes || []).map((n) => h('option', { value: n }, n)));
      const state = h('span', { class: 'state' }, stateText(m));
      const loadB = h('button', { type: 'button', 'aria-label': `Load ${m.id}`, disabled: !m.compatible, onclick: () => act(m, 'load', nodeSel.value, loadB) }, 'Load');
      const unloadB = h('button', { type: 'button', class: 'secondary', 'aria-label': `Unload ${m.id}`, onclick: () => act(m, 'unload', nodeSel.value, unloadB) }, 'Unload');
      const pinB = h('button', { type: 'button', class: 'secondary', 'aria-label': `${m.pinned ? 'Unpin' : 'Pin'} ${m.id}`, onclick: () => pin(m) }, m.pinned ? 'Unpin' : 'Pin');
      cells.set(m.id, { state, pinned: !!m.pinned });
      return [
        h('strong', {}, m.id), m.kind || '', m.format, bytes(m.size), m.quantization || 'none', m.architecture || '',
        String(m.context_length || ''),
        m.compatible ? 'yes' : h('span', { class: 'error' }, 'no: ' + (m.reason || 'unsupported')),
        (m.nodes || []).join(', '), state, m.pinned ? 'pinned' : '',
        h('div', { class: 'row' }, nodeSel, loadB, unloadB, pinB),
      ];
    });
    body.replaceChildren(
      table('', ['Model', 'Kind', 'Format', 'Size', 'Quantization', 'Architecture', 'Context', 'Compatible', 'On disk', 'State', 'Pinned', 'Actions'], rows),
      h('h2', {}, 'Per-model settings'),
      ...list.map((m) => settingsForm(m, load)),
      clustered ? h('h2', {}, 'Placements') : null,
      ...(clustered ? list.map((m) => placementForm(m)) : []));
  }

  async function load() {
    try {
      const doc = await api('GET', '/admin/api/models');
      if (alive) draw(doc.data || []);
    } catch (e) {
      if (alive) body.replaceChildren(h('p', { class: 'error', role: 'alert' }, e.message));
    }
  }

  async function poll() {
    try {
      const doc = await api('GET', '/admin/api/models');
      // A pin set through another node reaches this one a moment after
      // the write: redraw when it shows.
      if ((doc.data || []).some((m) => cells.has(m.id) && cells.get(m.id).pinned !== !!m.pinned)) {
        if (alive) draw(doc.data);
      }
      for (const m of doc.data || []) {
        const c = cells.get(m.id);
        if (c && !c.state.textContent.endsWith('…')) c.state.textContent = stateText(m);
      }
    } catch { /* the banner says so */ }
    if (alive) timer = setTimeout(poll, every);
  }

  // Placements exist in a cluster only (a lone node answers 404).
  api('GET', '/admin/api/cluster').then(() => { clustered = true; }, () => {})
    .then(load).then(() => { if (alive) timer = setTimeout(poll, every); });
  return () => { alive = false; clearTimeout(timer); };
}
