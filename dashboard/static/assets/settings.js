// Settings: the node's effective configuration, grouped, each value with
// where it comes from and whether a change needs a restart; changes are
// replicated to every node by the API.
import { api } from './api.js';
import { h, table } from './dom.js';

function group(key) {
  const first = key.split('_')[0];
  return { cache: 'Cache', cluster: 'Cluster', grpc: 'Cluster', join: 'Cluster', bootstrap: 'Cluster', raft: 'Cluster',
    log: 'Logs', api: 'Security', auth: 'Security', insecure: 'Security', key: 'Security', max: 'Limits', mcp: 'MCP' }[first] || 'Server';
}

export function render(main) {
  const out = h('div', { role: 'status', id: 'settings-msg' });
  const body = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  main.append(h('h1', {}, 'Settings'), out, body);
  let inputs = {};

  async function load() {
    try {
      const doc = await api('GET', '/admin/api/global-settings');
      draw(doc);
    } catch (e) {
      body.replaceChildren(h('p', { class: 'error', role: 'alert' }, e.message));
    }
  }

  function draw(doc) {
    inputs = {};
    const groups = new Map();
    for (const s of doc.settings) {
      const g = group(s.key);
      if (!groups.has(g)) groups.set(g, []);
      const input = s.secret
        ? h('span', { class: 'muted' }, s.value + ' (secret, not shown)')
        : h('input', { name: s.key, value: s.value, 'aria-label': s.key, 'data-was': s.value });
      if (!s.secret) inputs[s.key] = input;
      const source = s.cluster_value !== undefined
        ? [h('span', { class: 'badge' }, s.source), ` (the cluster's ${s.cluster_value} is shadowed here)`]
        : h('span', { class: 'badge' }, s.source);
      groups.get(g).push([h('code', {}, s.key), input, source,
        s.restart_required ? h('span', { class: 'state-warn' }, 'restart required') : (s.live ? 'applies live' : 'on restart')]);
    }
    const save = h('button', { type: 'submit' }, 'Save changes');
    const form = h('form', { 'aria-label': 'Global settings' },
      h('p', { class: 'muted' }, `Node ${doc.node}. Changes are replicated to every node of the cluster.`),
      [...groups.keys()].sort().map((g) => [h('h2', {}, g), table('', ['Setting', 'Value', 'Source', 'Applies'], groups.get(g))]),
      h('p', {}, save));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const change = {};
      for (const [k, el] of Object.entries(inputs)) if (el.value !== el.dataset.was) change[k] = el.value;
      if (!Object.keys(change).length) { out.replaceChildren(h('p', {}, 'Nothing changed.')); return; }
      try {
        const r = await api('POST', '/admin/api/global-settings', change);
        out.replaceChildren(h('p', { class: 'okmsg' }, `Saved. Applied live: ${r.applied.join(', ') || 'none'}. Restart required: ${r.restart_required.join(', ') || 'none'}.`));
        load();
      } catch (e) {
        out.replaceChildren(h('p', { class: 'error' }, `Refused (${e.status}): ${e.message}`));
      }
    });
    body.replaceChildren(form);
  }
  load();
}
