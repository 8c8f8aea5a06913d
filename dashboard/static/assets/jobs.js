// Jobs: every job of the cluster (downloads today), from the replicated
// records any node lists, polled every second — one request covers all
// the jobs and a node's record of a running job changes about once a
// second, so a stream per job would add connections, not freshness. Each
// job shows its state, progress (bar, bytes, rate, ETA), log tail and
// error in words; Cancel stops a running job (on its node, wherever it
// is asked), Delete removes a finished one's record.
import { api } from './api.js';
import { h, bytes } from './dom.js';
import { hubWords } from './hub.js';

const every = 1000; // ms between list polls
const logTail = 20; // log lines shown per job
const live = ['queued', 'running'];

function stateClass(s) {
  if (s === 'done') return 'state-ok';
  if (s === 'running' || s === 'queued') return 'state-warn';
  return 'state-bad';
}

function amount(p, n) {
  return p.unit === 'bytes' ? bytes(n) : `${n} ${p.unit || 'steps'}`;
}

function duration(s) {
  if (!s || s < 0) return '–';
  s = Math.round(s);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function progressText(j) {
  const p = j.progress || {};
  const parts = [p.total ? `${amount(p, p.done)} of ${amount(p, p.total)} (${(p.percent || 0).toFixed(1)} %)` : amount(p, p.done || 0)];
  if (live.includes(j.state)) {
    parts.push(p.rate ? `${amount(p, Math.round(p.rate))}/s` : 'rate –');
    parts.push(`ETA ${duration(p.eta_seconds)}`);
  }
  return parts.join(' · ');
}

function what(j) {
  let p = {};
  try { p = typeof j.params === 'string' ? JSON.parse(j.params) : (j.params || {}); } catch { /* not JSON */ }
  if (!p.repo && p.model) {
    // A benchmark's: on each node holding the model, or a list of nodes.
    const on = p.nodes === 'each' ? ' on every node holding it' : Array.isArray(p.nodes) ? ` on ${p.nodes.join(', ')}` : '';
    return p.model + on;
  }
  if (!p.repo) return '';
  let s = `${p.repo}${p.revision ? '@' + p.revision : ''}${p.name ? ' as ' + p.name : ''}`;
  if (p.placement) {
    const r = p.placement.replicas || 1;
    s += ` to the nodes of ${r} replica${r === 1 ? '' : 's'}${p.placement.stages ? ' of ' + p.placement.stages + ' stages' : ''}`;
  }
  return s;
}

// card builds the elements of one job; update fills them from a record.
function card(j, onAction) {
  const el = {
    state: h('span', {}),
    bar: h('progress', { max: '100', 'aria-label': `Progress of job ${j.id}` }),
    figures: h('span', { class: 'job-figures' }),
    error: h('p', { class: 'error job-error', role: 'status' }),
    log: h('pre', { class: 'job-log' }),
    msg: h('span', { role: 'status', class: 'job-msg' }),
    cancel: h('button', { type: 'button', class: 'danger', 'aria-label': `Cancel job ${j.id}` }, 'Cancel'),
    del: h('button', { type: 'button', class: 'secondary', 'aria-label': `Delete job ${j.id}` }, 'Delete'),
  };
  el.cancel.addEventListener('click', () => onAction(j.id, 'cancel', el));
  el.del.addEventListener('click', () => onAction(j.id, 'delete', el));
  el.root = h('div', { class: 'card job', 'data-job-id': j.id },
    h('div', { class: 'job-head' }, h('strong', {}, j.kind), ' ', h('code', {}, j.id), ' on ', h('strong', { class: 'job-node' }, j.node), ' · ', el.state),
    h('div', { class: 'muted' }, what(j)),
    h('div', { class: 'job-progress' }, el.bar, el.figures),
    el.error,
    h('details', {}, h('summary', {}, 'Log'), el.log),
    h('div', { class: 'row' }, el.cancel, el.del, el.msg));
  return el;
}

function update(el, j) {
  el.state.className = 'job-state ' + stateClass(j.state);
  el.state.textContent = j.state;
  const p = j.progress || {};
  if (j.state === 'done') el.bar.value = 100;
  else if (p.total) el.bar.value = Math.min(100, p.percent || 0);
  else if (live.includes(j.state)) el.bar.removeAttribute('value'); // unknown total: indeterminate
  else el.bar.value = 0;
  el.figures.textContent = progressText(j);
  const words = j.error && j.state !== 'cancelled' ? hubWords(0, j.error) : '';
  el.error.textContent = j.error ? (words ? words + ' — ' : '') + j.error : '';
  el.error.hidden = !j.error;
  el.log.textContent = (j.log || []).slice(-logTail).join('\n') || '(no log lines yet)';
  el.cancel.hidden = !live.includes(j.state);
  el.del.hidden = live.includes(j.state);
}

export function render(main) {
  const list = h('div', { class: 'jobs' });
  const status = h('p', { class: 'muted', role: 'status' }, 'Loading…');
  main.append(h('h1', {}, 'Jobs'),
    h('p', { class: 'muted' }, 'Downloads and other long tasks of every node. Start a download on the ', h('a', { href: '/admin/hub' }, 'Hugging Face page'), '.'),
    status, list);
  const cards = new Map();
  let timer = 0, alive = true;

  async function onAction(id, action, el) {
    el.msg.className = 'job-msg';
    el.msg.textContent = action === 'cancel' ? 'Cancelling…' : 'Deleting…';
    try {
      const doc = await api('DELETE', `/admin/api/jobs/${encodeURIComponent(id)}`);
      if (action === 'cancel' && doc && doc.state) update(el, doc);
      el.msg.textContent = '';
      if (action === 'delete') { el.root.remove(); cards.delete(id); }
    } catch (e) {
      el.msg.className = 'job-msg error';
      el.msg.textContent = `Refused (${e.status}): ${e.message}`;
    }
  }

  async function poll() {
    try {
      const doc = await api('GET', '/admin/api/jobs');
      if (!alive) return;
      const jobs = (doc.data || []).slice().sort((x, y) => (y.created_at || '').localeCompare(x.created_at || ''));
      const seen = new Set();
      jobs.forEach((j, i) => {
        seen.add(j.id);
        let el = cards.get(j.id);
        if (!el) { el = card(j, onAction); cards.set(j.id, el); }
        update(el, j);
        if (list.children[i] !== el.root) list.insertBefore(el.root, list.children[i] || null);
      });
      for (const [id, el] of cards) if (!seen.has(id)) { el.root.remove(); cards.delete(id); }
      const running = jobs.filter((j) => live.includes(j.state)).length;
      status.textContent = jobs.length ? `${jobs.length} jobs, ${running} running or queued.` : 'No jobs.';
    } catch (e) {
      if (alive) status.textContent = `Could not list the jobs (${e.status}): ${e.message}`;
    }
    if (alive) timer = setTimeout(poll, every);
  }
  poll();
  return () => { alive = false; clearTimeout(timer); };
}
