// The admin API from the browser: the session's CSRF token on every
// state-changing call, errors turned into messages, the connection's state
// reported to the page.

let csrf = '';
const listeners = { connection: [], signedOut: [] };

export function setCSRF(token) { csrf = token || ''; }
export function on(what, fn) { listeners[what].push(fn); }
function emit(what, ...a) { for (const fn of listeners[what]) fn(...a); }

// APIError is a refusal of the node (status ≥ 400) or a lost connection
// (status 0), with the API's message.
export class APIError extends Error {
  constructor(status, message, param) {
    super(message);
    this.status = status;
    this.param = param || '';
  }
}

// request sends one call and returns its Response (the caller reads it).
export async function request(method, path, body, { signal, signedOutOK } = {}) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (!['GET', 'HEAD'].includes(method)) headers['X-CSRF-Token'] = csrf;
  let resp;
  try {
    resp = await fetch(path, {
      method, headers, signal, credentials: 'same-origin',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    emit('connection', false);
    throw new APIError(0, 'The node cannot be reached (' + e.message + ').');
  }
  emit('connection', true);
  if (!resp.ok) {
    const text = await resp.text();
    let msg = text || resp.statusText, param = '';
    try {
      const doc = JSON.parse(text);
      if (doc && doc.error) { msg = doc.error.message || msg; param = doc.error.param || ''; }
    } catch { /* not JSON: the text is the message */ }
    if (resp.status === 401 && !signedOutOK) emit('signedOut', msg);
    throw new APIError(resp.status, msg, param);
  }
  return resp;
}

// api sends one call and returns its JSON.
export async function api(method, path, body, opts) {
  const resp = await request(method, path, body, opts);
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

// events reads a server-sent event stream, calling onEvent(name, data)
// for each event until the stream ends or signal aborts.
export async function events(resp, onEvent) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i).replace(/^\r?\n\r?\n/, '');
      let name = 'message';
      const data = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith('event:')) name = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) onEvent(name, data.join('\n'));
    }
  }
}
