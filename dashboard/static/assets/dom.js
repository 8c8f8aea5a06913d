// A tiny DOM builder: every text goes in as text, never as HTML.

// h builds an element: h('button', {onclick, 'aria-label': ...}, 'text', child).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  add(el, children);
  return el;
}

function add(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) add(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

// field is a labelled control: h('label', ...) then the control, with a
// unique id tying them.
let ids = 0;
export function field(labelText, control) {
  const id = control.id || ('f' + (++ids));
  control.id = id;
  return h('div', {}, h('label', { for: id }, labelText), control);
}

// table builds a table from column titles and rows of cells.
export function table(caption, cols, rows) {
  return h('div', { class: 'scroll' }, h('table', {},
    caption ? h('caption', { class: 'muted' }, caption) : null,
    h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c)))))));
}

export function bytes(n) {
  if (!n) return '0 B';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}

export function num(n, digits = 1) {
  if (n === undefined || n === null) return '–';
  return Number.isInteger(n) ? String(n) : n.toFixed(digits);
}

// sparkline is an inline SVG line of the values (no script, no style
// attribute: the CSP allows neither inline).
export function sparkline(values, label) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 100 32');
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  const max = Math.max(1e-9, ...values);
  const pts = values.map((v, i) => `${(values.length < 2 ? 0 : (i * 100) / (values.length - 1)).toFixed(1)},${(31 - (v / max) * 30).toFixed(1)}`);
  const line = document.createElementNS(ns, 'polyline');
  line.setAttribute('points', pts.join(' '));
  svg.append(line);
  return svg;
}
