// The model hub's pages (Hugging Face / ModelScope, quantization,
// benchmarks, profiles): each calls its endpoint and shows the answer;
// until the model hub exists that is the API's 501 message.
import { api } from './api.js';
import { h, field } from './dom.js';

function answer(out, p) {
  out.replaceChildren(h('p', {}, 'Working…'));
  p.then((doc) => out.replaceChildren(h('pre', {}, JSON.stringify(doc, null, 2))))
    .catch((e) => out.replaceChildren(h('p', { class: e.status === 501 ? 'muted' : 'error', role: 'status' },
      e.status === 501 ? `Not available yet: ${e.message}` : `Refused (${e.status}): ${e.message}`)));
}

export function renderHub(main) {
  const q = h('input', { name: 'search', type: 'search' });
  const src = h('select', { name: 'source' }, h('option', { value: 'hf' }, 'Hugging Face'), h('option', { value: 'modelscope' }, 'ModelScope'));
  const out = h('div', { class: 'hub-answer' });
  const form = h('form', { 'aria-label': 'Search models' }, h('div', { class: 'row' }, field('Search', q), field('Source', src), h('button', { type: 'submit' }, 'Search')));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    answer(out, api('GET', '/admin/api/hf/models?' + new URLSearchParams({ search: q.value, source: src.value })));
  });
  main.append(h('h1', {}, 'Hugging Face / ModelScope'), form, out);
  answer(out, api('GET', '/admin/api/hf/models'));
}

function startPage(main, title, path, labelText) {
  const model = h('input', { name: 'model' });
  const out = h('div', { class: 'hub-answer' });
  const form = h('form', { 'aria-label': title }, h('div', { class: 'row' }, field('Model', model), h('button', { type: 'submit' }, labelText)));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    answer(out, api('POST', path, { model: model.value }));
  });
  main.append(h('h1', {}, title), form, out);
  return form;
}

export function renderOQ(main) { startPage(main, 'Quantization (oQ)', '/admin/api/oq/start', 'Start quantization'); }
export function renderBench(main) { startPage(main, 'Benchmarks', '/admin/api/bench/run', 'Run benchmark'); }
export function renderProfiles(main) {
  main.append(h('h1', {}, 'Profiles'), h('p', { class: 'muted', role: 'status' },
    'Per-model performance profiles are built from benchmark runs, which come with the model hub: see Benchmarks.'));
}
