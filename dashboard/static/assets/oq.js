// Quantization (oQ): a form that starts a quantization job of a model of
// a node's models directory (a float safetensors directory or a float
// GGUF file), then follows that job to its end — its record polled every
// second from any node, records being replicated — and shows the
// result: the new model's size, bits per weight and the perplexity delta
// against the source (the job always asks for the evaluation).
import { api } from './api.js';
import { h, field, bytes, num } from './dom.js';

const every = 1000; // ms between polls of the job's record
const live = ['queued', 'running'];

// resultFigures is the job's result as a definition list.
function resultFigures(r) {
  const rows = [
    ['New model', r.model],
    ['Format', r.format === 'gguf' ? `GGUF ${r.type}` : `MLX affine ${r.mixed ? `mixed (${num(r.avg_bits, 2)} code bits on average)` : `${r.bits}-bit`}, group ${r.group_size}`],
    ['Size', bytes(r.bytes)],
    ['Bits per weight', num(r.bits_per_weight, 3)],
    ['Tensors', `${r.tensors}, of which ${r.quantized} quantized${r.raised ? `, ${r.raised} raised` : ''}`],
  ];
  // A mixed plan: the tensors at each width; its per-tensor figures are
  // a file of the new model (the result keeps the most sensitive few).
  if (r.mixed && r.widths) {
    rows.push(['Widths', Object.entries(r.widths).map(([w, n]) => `${n} at ${w}`).join(', ')]);
  }
  if (r.plan_file) {
    const most = (r.most_sensitive || []).map((t) => `${t.name} (${t.bits}/${t.group_size})`).join(', ');
    rows.push(['Plan', `${r.plan_file} in the new model's directory${most ? `; most sensitive: ${most}` : ''}`]);
  }
  if (r.perplexity_delta !== undefined && r.perplexity_delta !== null) {
    const s = r.source_score || {}, q = r.quantized_score || {};
    rows.push(['Perplexity', `${num(s.perplexity, 3)} → ${num(q.perplexity, 3)} over ${q.tokens ?? '–'} tokens`]);
    rows.push(['Perplexity delta', `${r.perplexity_delta >= 0 ? '+' : ''}${num(r.perplexity_delta, 4)}`]);
  }
  return h('dl', { class: 'oq-result' }, rows.map(([k, v]) => [h('dt', {}, k), h('dd', { 'data-k': k }, v)]));
}

function progressText(p) {
  if (!p || !p.total) return 'starting…';
  return `${p.done} of ${p.total} ${p.unit || 'steps'} (${(p.percent || 0).toFixed(1)} %)`;
}

export function render(main) {
  const model = h('input', { name: 'model', list: 'oq-models', placeholder: 'a float model: directory or .gguf' });
  const choices = h('datalist', { id: 'oq-models' });
  const bits = h('input', { name: 'bits', type: 'number', value: '4', min: '2', max: '8' });
  const group = h('select', { name: 'group_size' }, ['64', '32', '128'].map((g) => h('option', { value: g }, g)));
  const target = h('input', { name: 'target_bits', type: 'number', step: '0.1', placeholder: 'uniform' });
  const high = h('input', { name: 'high_bits', type: 'number', value: '8', min: '3', max: '8' });
  // Calibrated: each tensor's bits chosen by how far it moves the model's predictions on a bundled text.
  const calibrate = h('input', { name: 'calibrate', type: 'checkbox' });
  // Output: an MLX affine directory (bits, group size, target) or one GGUF file of a type.
  const format = h('select', { name: 'format' }, [['mlx', 'MLX affine'], ['Q4_K_M', 'GGUF Q4_K_M'], ['Q8_0', 'GGUF Q8_0'], ['Q6_K', 'GGUF Q6_K']]
    .map(([v, label]) => h('option', { value: v }, label)));
  const out = h('div', { class: 'hub-answer oq-job' });
  const form = h('form', { 'aria-label': 'Quantization (oQ)' },
    h('div', { class: 'row' }, field('Model', model), choices, field('Output', format), field('Bits', bits), field('Group size', group),
      field('Target bits (mixed)', target), field('High bits (mixed)', high), field('Calibrate (mixed)', calibrate),
      h('button', { type: 'submit' }, 'Start quantization')));
  main.append(h('h1', {}, 'Quantization (oQ)'), form,
    h('p', { class: 'muted' }, 'From a float model (BF16/F16/F32 safetensors, or an F16/BF16/F32 GGUF); a quantized GGUF is refused. ',
      'It runs as a job, followed here to its end (also on ', h('a', { href: '/admin/jobs' }, 'the Jobs page'), ').'), out);

  let alive = true, timer = 0;
  api('GET', '/admin/api/models').then((doc) => {
    if (alive) choices.replaceChildren(...(doc.data || []).map((m) => h('option', { value: m.id })));
  }).catch(() => { /* the list is a convenience */ });

  function body() {
    if (format.value !== 'mlx') return { format: 'gguf', type: format.value, evaluate: true };
    const b = { bits: Number(bits.value), group_size: Number(group.value), evaluate: true };
    if (target.value) {
      b.target_bits = Number(target.value);
      b.high_bits = Number(high.value);
      if (calibrate.checked) b.calibrate = true;
    }
    return b;
  }

  // follow shows job id's record until it is final.
  function follow(id, head) {
    const bar = h('progress', { max: '100', 'aria-label': `Progress of job ${id}` });
    const figures = h('span', { class: 'job-figures' });
    const state = h('span', { class: 'job-state' });
    const end = h('div', { role: 'status', class: 'oq-end' });
    out.replaceChildren(head, h('div', { class: 'job-progress' }, state, ' ', bar, figures), end);
    const poll = async () => {
      if (!alive) return;
      let j;
      try {
        j = await api('GET', `/admin/api/jobs/${encodeURIComponent(id)}`);
      } catch (e) {
        end.className = 'oq-end error';
        end.textContent = `Could not read the job (${e.status}): ${e.message}`;
        timer = setTimeout(poll, every);
        return;
      }
      if (!alive) return;
      state.textContent = j.state;
      const p = j.progress || {};
      if (j.state === 'done') bar.value = 100;
      else if (p.total) bar.value = Math.min(100, p.percent || 0);
      figures.textContent = ' ' + progressText(p);
      if (live.includes(j.state)) {
        end.className = 'oq-end';
        end.textContent = '';
        timer = setTimeout(poll, every);
        return;
      }
      if (j.state === 'done' && j.result) {
        end.className = 'oq-end';
        end.replaceChildren(h('p', { class: 'okmsg' }, `Done: ${j.result.model} is in the models directory of ${j.node}.`), resultFigures(j.result));
      } else {
        end.className = 'oq-end error';
        end.textContent = `The job ended ${j.state}${j.error ? ': ' + j.error : ''}.`;
      }
    };
    poll();
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearTimeout(timer);
    out.replaceChildren(h('p', { role: 'status' }, 'Starting…'));
    try {
      const j = await api('POST', '/admin/api/oq/start', { model: model.value.trim(), ...body() });
      if (!alive) return;
      follow(j.id, h('p', { class: 'oq-started' }, `Job `, h('code', {}, j.id), ` (${j.kind}) started on ${j.node}.`));
    } catch (e) {
      out.replaceChildren(h('p', { class: 'error', role: 'status' }, `Refused (${e.status}): ${e.message}`));
    }
  });
  return () => { alive = false; clearTimeout(timer); };
}
