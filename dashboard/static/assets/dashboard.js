// Dashboard: every node (status, leader, backend, memory, loaded models,
// tokens/s), cluster totals with sparklines, prefix-cache hit rates and
// placements; polled from the stats, models and cluster endpoints.
import { api } from './api.js';
import { h, table, bytes, num, sparkline } from './dom.js';

const every = 2000; // ms between polls
const historyEvery = 10000; // ms between reads of the nodes' last hour

// series turns the nodes' history (GET /admin/api/stats/history: each
// node's points over the last hour, one per every_seconds) into one value
// per time step, combining the nodes' values with combine.
function series(hist, key, combine) {
  if (!hist) return [];
  const buckets = new Map();
  for (const pts of Object.values(hist.nodes || {})) {
    for (const p of pts) {
      const b = Math.round(p.t / hist.every_seconds);
      buckets.set(b, combine(buckets.get(b), p[key]));
    }
  }
  return [...buckets.keys()].sort((a, b) => a - b).map((b) => buckets.get(b));
}
const sum = (a, v) => (a || 0) + v;
const most = (a, v) => Math.max(a || 0, v);

function card(label, value, series) {
  return h('div', { class: 'card' }, h('div', { class: 'k' }, label), h('div', { class: 'v' }, value),
    series ? sparkline(series, label + ' over the last hour') : null);
}

function statusCell(st) {
  const cls = st === 'alive' ? 'state-ok' : (st === 'failed' ? 'state-bad' : 'state-warn');
  return h('span', { class: cls }, st); // the word carries the state, the dot only repeats it
}

export function render(main) {
  const body = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  main.append(h('h1', {}, 'Dashboard'), body);
  let timer = 0, alive = true, hist = null, histAt = 0;

  async function tick() {
    try {
      const [stats, models, cluster, health] = await Promise.all([
        api('GET', '/admin/api/stats'),
        api('GET', '/admin/api/models'),
        api('GET', '/admin/api/cluster').catch((e) => (e.status === 404 ? null : Promise.reject(e))),
        fetch('/health').then((r) => r.json()).catch(() => null),
      ]);
      if (Date.now() - histAt >= historyEvery) {
        histAt = Date.now();
        hist = await api('GET', '/admin/api/stats/history').catch(() => hist);
      }
      if (!alive) return;
      draw(stats, models.data || [], cluster, health);
    } catch (e) {
      if (!alive) return;
      body.replaceChildren(h('p', { class: 'error', role: 'alert' }, e.message));
    }
    if (alive) timer = setTimeout(tick, every);
  }

  function draw(stats, models, cluster, health) {
    const total = stats.total;
    const ser = (k, combine) => series(hist, k, combine || sum);
    const members = cluster ? cluster.members : [{ id: stats.node, status: 'alive', leader: false, backend: health && health.backend ? health.backend.name : '' }];
    const loadedOn = (id) => models.filter((m) => (m.loaded_on || []).includes(id)).map((m) => m.id);
    const nodeRows = members.map((m) => {
      const s = (stats.nodes || {})[m.id];
      const mem = s ? s.memory : null;
      return [
        m.id,
        statusCell(m.status),
        m.leader ? 'leader' : (cluster ? 'follower' : 'alone'),
        m.backend || '–',
        mem ? h('div', { class: 'ram' }, `${bytes(mem.ram_total - mem.ram_free)} / ${bytes(mem.ram_total)}`,
          sparkline(((hist && hist.nodes[m.id]) || []).map((p) => p.ram_used), `RAM used on ${m.id} over the last hour`)) : 'no answer',
        mem ? bytes(mem.kv) : '–',
        loadedOn(m.id).join(', ') || 'none',
        s ? num(s.rates.decode_tokens_per_second_1m) : '–',
        s ? `${s.active_requests} / ${s.queued_requests}` : '–',
      ];
    });
    const pc = total.prefix_cache || {};
    const parts = [
      h('h2', {}, 'Cluster totals'),
      h('div', { class: 'cards' },
        card('Nodes', String(members.length)),
        card('Requests (session)', String(total.session.requests), ser('requests_per_second')),
        card('Failed requests', String(total.session.failed_requests)),
        card('Tokens in / out', `${total.session.tokens_in} / ${total.session.tokens_out}`),
        card('Decode tokens/s (1 min)', num(total.rates.decode_tokens_per_second_1m), ser('decode_tokens_per_second')),
        card('Prefill tokens/s (1 min)', num(total.rates.prefill_tokens_per_second_1m), ser('prefill_tokens_per_second')),
        card('TTFT p50 / p95 (s)', `${num(total.ttft_seconds.p50, 3)} / ${num(total.ttft_seconds.p95, 3)}`, ser('ttft_p95', most)),
        card('Active / queued', `${total.active_requests} / ${total.queued_requests}`),
        card('Prefix cache hit rate', `${num(100 * (pc.hit_rate || 0))} % (hot ${num(100 * (pc.hot_hit_rate || 0))} %, SSD ${num(100 * (pc.ssd_hit_rate || 0))} %)`)),
      h('h2', {}, 'Nodes'),
      table('', ['Node', 'Status', 'Role', 'Backend', 'RAM used', 'KV', 'Loaded models', 'Decode tok/s', 'Active / queued'], nodeRows),
    ];
    const silent = Object.keys(stats.unreachable || {});
    if (silent.length) {
      parts.push(h('p', { class: 'error' }, 'Not answering: ' + silent.join(', ')));
    }
    if (cluster) {
      parts.push(h('h2', {}, 'Placements'));
      parts.push(cluster.placements.length
        ? table('', ['Model', 'Replica', 'Stages (node: layers, state)'], cluster.placements.map((p) =>
          [p.model, String(p.replica), p.stages.map((s) => `${s.node}: ${s.layers[0]}–${s.layers[1]} ${s.state}`).join('; ')]))
        : h('p', { class: 'muted' }, 'No placements yet.'));
    }
    body.replaceChildren(...parts);
  }

  tick();
  return () => { alive = false; clearTimeout(timer); };
}
