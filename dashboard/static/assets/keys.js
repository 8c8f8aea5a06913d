// Sub-API keys: create (the key is shown once, with a copy button), list
// with usage, scopes and limits, delete.
import { api } from './api.js';
import { h, field, table } from './dom.js';

const scopes = ['inference', 'embeddings', 'audio', 'images', 'mcp', 'agent', 'admin-read', 'admin'];

export function render(main) {
  const name = h('input', { name: 'name', required: true });
  const boxes = scopes.map((s) => h('input', { type: 'checkbox', name: 'scope', value: s, checked: s === 'inference' }));
  const models = h('input', { name: 'models', placeholder: 'all models' });
  const rpm = h('input', { name: 'rpm', inputmode: 'numeric', placeholder: 'no limit' });
  const tpm = h('input', { name: 'tpm', inputmode: 'numeric', placeholder: 'no limit' });
  const expires = h('input', { name: 'expires_in', inputmode: 'numeric', placeholder: 'never' });
  const out = h('div', { role: 'status', id: 'key-created' });
  const list = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const form = h('form', { 'aria-label': 'Create a sub-key' },
    h('div', { class: 'row' }, field('Name', name), field('Models (comma-separated)', models),
      field('Requests per minute', rpm), field('Tokens per minute', tpm), field('Expires in (seconds)', expires)),
    h('fieldset', {}, h('legend', {}, 'Scopes'), boxes.map((b) => h('label', { class: 'inline' }, b, b.value))),
    h('button', { type: 'submit' }, 'Create key'), out);
  main.append(h('h1', {}, 'Sub-API keys'), h('h2', {}, 'New key'), form, h('h2', {}, 'Keys'), list);

  const int = (el) => (el.value.trim() === '' ? undefined : (Number.isNaN(Number(el.value)) ? el.value : Number(el.value)));

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { name: name.value.trim(), scopes: boxes.filter((b) => b.checked).map((b) => b.value) };
    const ms = models.value.split(',').map((s) => s.trim()).filter(Boolean);
    if (ms.length) body.models = ms;
    const limit = {};
    if (int(rpm) !== undefined) limit.requests_per_minute = int(rpm);
    if (int(tpm) !== undefined) limit.tokens_per_minute = int(tpm);
    if (Object.keys(limit).length) body.rate_limit = limit;
    if (int(expires) !== undefined) body.expires_in = int(expires);
    try {
      const k = await api('POST', '/admin/api/subkeys', body);
      const secret = h('div', { class: 'secret', id: 'new-key' }, k.key);
      const copy = h('button', { type: 'button', class: 'secondary' }, 'Copy key');
      copy.addEventListener('click', async () => {
        try { await navigator.clipboard.writeText(k.key); copy.textContent = 'Copied'; } catch { copy.textContent = 'Select the key and copy it'; }
      });
      out.replaceChildren(h('p', { class: 'okmsg' }, `Key ${k.id} created. It is shown once: copy it now.`), secret, copy);
      name.value = '';
      load();
    } catch (e) {
      out.replaceChildren(h('p', { class: 'error' }, `Refused (${e.status}): ${e.message}`));
    }
  });

  async function del(k) {
    try {
      await api('DELETE', `/admin/api/subkeys/${encodeURIComponent(k.id)}`);
      out.replaceChildren(h('p', { class: 'okmsg' }, `Key ${k.name || k.id} deleted.`));
    } catch (e) {
      out.replaceChildren(h('p', { class: 'error' }, e.message));
    }
    load();
  }

  async function load() {
    try {
      const doc = await api('GET', '/admin/api/subkeys');
      const keys = doc.data || [];
      list.replaceChildren(keys.length ? table('', ['Name', 'Id', 'Prefix', 'Scopes', 'Models', 'Limits (req/min, tok/min)', 'Usage (requests, tokens)', 'Expires', ''],
        keys.map((k) => [
          k.name || '', k.id, k.prefix, (k.scopes || []).join(', '), (k.models || []).join(', ') || 'all',
          `${k.rate_limit.requests_per_minute || '∞'}, ${k.rate_limit.tokens_per_minute || '∞'}`,
          k.usage ? `${k.usage.requests}, ${k.usage.tokens}` : '0, 0',
          k.expired ? 'expired' : (k.expires_at || 'never'),
          h('button', { type: 'button', class: 'danger', 'aria-label': `Delete key ${k.name || k.id}`, onclick: () => del(k) }, 'Delete'),
        ])) : h('p', { class: 'muted' }, 'No sub-keys.'));
    } catch (e) {
      list.replaceChildren(h('p', { class: 'error', role: 'alert' }, e.message));
    }
  }
  load();
}
