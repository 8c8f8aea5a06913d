// The panel's shell: sign-in, the navigation, history routes (/admin/<page>),
// and the connection banner. Each page is a module whose render(main)
// draws it and returns a function that stops what it started.
import { api, on, setCSRF, APIError } from './api.js';
import { h, field } from './dom.js';
import * as dashboard from './dashboard.js';
import * as models from './models.js';
import * as chat from './chat.js';
import * as keys from './keys.js';
import * as settings from './settings.js';
import * as logs from './logs.js';
import * as hub from './hub.js';
import * as jobs from './jobs.js';
import * as oq from './oq.js';

const pages = [
  ['', 'Dashboard', dashboard.render],
  ['models', 'Models', models.render],
  ['chat', 'Chat', chat.render],
  ['keys', 'Sub-API keys', keys.render],
  ['settings', 'Settings', settings.render],
  ['logs', 'Logs', logs.render],
  ['hub', 'Hugging Face', hub.renderHub],
  ['jobs', 'Jobs', jobs.render],
  ['oq', 'Quantization', oq.render],
  ['bench', 'Benchmarks', hub.renderBench],
  ['profiles', 'Profiles', hub.renderProfiles],
];

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const banner = document.getElementById('banner');
const signout = document.getElementById('signout');
let stop = () => {};
let authOn = true;

function pageName() {
  return location.pathname.replace(/^\/admin\/?/, '').split('/')[0];
}

function go(path) {
  history.pushState(null, '', path);
  show();
}

function drawNav() {
  const cur = pageName();
  nav.replaceChildren(...pages.map(([p, title]) =>
    h('a', { href: '/admin/' + p, 'aria-current': p === cur ? 'page' : null }, title)));
  nav.hidden = false;
  signout.hidden = !authOn;
}

function show() {
  stop();
  stop = () => {};
  const name = pageName();
  const page = pages.find(([p]) => p === name);
  drawNav();
  main.replaceChildren();
  if (!page) {
    main.append(h('h1', {}, 'Not found'), h('p', {}, 'No page here. ', h('a', { href: '/admin/' }, 'Go to the dashboard.')));
    return;
  }
  document.title = page[1] + ' · fusion admin';
  stop = page[2](main) || (() => {});
}

function signIn(message) {
  stop();
  stop = () => {};
  nav.hidden = true;
  signout.hidden = true;
  document.title = 'Sign in · fusion admin';
  const key = h('input', { type: 'password', name: 'key', autocomplete: 'current-password', required: true });
  const err = h('p', { class: 'error', role: 'alert' }, message || '');
  const form = h('form', { class: 'signin', 'aria-labelledby': 'signin-title' },
    h('h1', { id: 'signin-title' }, 'Sign in'),
    h('p', { class: 'muted' }, 'Enter the node\'s admin key (its --api-key).'),
    field('Admin key', key), err,
    h('button', { type: 'submit' }, 'Sign in'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.textContent = '';
    try {
      const s = await api('POST', '/admin/session', { key: key.value }, { signedOutOK: true });
      setCSRF(s.csrf_token);
      show();
    } catch (e) {
      err.textContent = e.status === 401 ? 'Wrong key: ' + e.message : e.message;
      key.select();
    }
  });
  main.replaceChildren(form);
  key.focus();
}

// Links inside the panel change the page without a reload.
document.addEventListener('click', (ev) => {
  const a = ev.target.closest('a');
  if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin === location.origin && url.pathname.startsWith('/admin/') && !url.pathname.startsWith('/admin/api/')) {
    ev.preventDefault();
    go(url.pathname);
  }
});
window.addEventListener('popstate', show);

signout.addEventListener('click', async () => {
  try { await api('DELETE', '/admin/session', undefined, { signedOutOK: true }); } catch { /* signed out anyway */ }
  setCSRF('');
  signIn('Signed out.');
});

on('signedOut', (msg) => signIn('Your session ended (' + msg + '). Sign in again.'));
on('connection', (up) => {
  if (up) {
    banner.hidden = true;
  } else {
    banner.textContent = 'Connection to the node lost: retrying…';
    banner.hidden = false;
  }
});

async function start() {
  try {
    const s = await api('GET', '/admin/session');
    authOn = s.auth;
    if (!s.signed_in) { signIn(); return; }
    setCSRF(s.csrf_token);
    show();
  } catch (e) {
    main.replaceChildren(h('h1', {}, 'fusion admin'), h('p', { class: 'error', role: 'alert' }, e.message));
    if (e instanceof APIError && e.status === 0) setTimeout(start, 2000);
  }
}
start();
