// Dashboard: every node (status, leader, backend, memory, loaded models,
// tokens/s), cluster totals with sparklines, prefix-cache hit rates and
// placements; polled from the stats, models and cluster endpoints.
import { api } from './api.js';
import { h, table, bytes, num, sparkline } from './dom.js';

const every = 2000; // ms between polls
const keep = 1800; // samples kept: an hour at one per 2 s
const history = []; // {t, requests, decode, prefill, ttft50, ttft95}
const ramHistory = new Map(); // node id → RAM used, one per sample

function sampleRAM(nodes) {
  for (const [id, s] of Object.entries(nodes || {})) {
    const m = s.memory;
    if (!m) continue;
    if (!ramHistory.has(id)) ramHistory.set(id, []);
    const h = ramHistory.get(id);
    h.push(m.ram_total - m.ram_free);
    if (h.length > keep) h.shift();
  }
}

function sample(total) {
  const now = Date.now();
  const prev = history[history.length - 1];
  const reqs = total.session.requests;
  const rps = prev ? Math.max(0, (reqs - prev.requests) / ((now - prev.t) / 1000)) : 0;
  history.push({
    t: now, requests: reqs, rps,
    decode: total.rates.decode_tokens_per_second_1m, prefill: total.rates.prefill_tokens_per_second_1m,
    ttft50: total.ttft_seconds.p50, ttft95: total.ttft_seconds.p95,
  });
  if (history.length > keep) history.shift();
}

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
  let timer = 0, alive = true;

  async function tick() {
    try {
      const [stats, models, cluster, health] = await Promise.all([
        api('GET', '/admin/api/stats'),
        api('GET', '/admin/api/models'),
        api('GET', '/admin/api/cluster').catch((e) => (e.status === 404 ? null : Promise.reject(e))),
        fetch('/health').then((r) => r.json()).catch(() => null),
      ]);
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
    sample(total);
    sampleRAM(stats.nodes);
    const ser = (k) => history.map((s) => s[k]);
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
          sparkline(ramHistory.get(m.id) || [], `RAM used on ${m.id} over the last hour`)) : 'no answer',
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
        card('Requests (session)', String(total.session.requests), ser('rps')),
        card('Failed requests', String(total.session.failed_requests)),
        card('Tokens in / out', `${total.session.tokens_in} / ${total.session.tokens_out}`),
        card('Decode tokens/s (1 min)', num(total.rates.decode_tokens_per_second_1m), ser('decode')),
        card('Prefill tokens/s (1 min)', num(total.rates.prefill_tokens_per_second_1m), ser('prefill')),
        card('TTFT p50 / p95 (s)', `${num(total.ttft_seconds.p50, 3)} / ${num(total.ttft_seconds.p95, 3)}`, ser('ttft95')),
        card('Active / queued', `${total.active_requests} / ${total.queued_requests}`),
        card('Prefix cache hit rate', `${num(100 * (pc.hit_rate || 0))} % (hot ${num(100 * (pc.hot_hit_rate || 0))} %, SSD ${num(100 * (pc.ssd_hit_rate || 0))} %)`)),
      h('h2', {}, 'Nodes'),
      table('', ['Node', 'Status', 'Role', 'Backend', 'RAM used', 'KV', 'Loaded models', 'Decode tok/s', 'Active / queued'], nodeRows),
    ];
    if (stats.unreachable && stats.unreachable.length) {
      parts.push(h('p', { class: 'error' }, 'Not answering: ' + stats.unreachable.join(', ')));
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
