// Shared by every page: the HTTP API client (with the user's credentials), formatting, small components.
import { h } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import htm from 'htm';

export const html = htm.bind(h);

// ---------------------------------------------------------------- the session and the HTTP API

// Set once by app.js from /console/session.json: whether the node asks for credentials, and the cluster id.
export const session = { authentication: false, basic: true, apikey: true, clusterId: '', user: null,
                         downloadMaxRecords: 100000, downloadMaxBytes: 64 << 20,
                         authorization: sessionStorage.getItem('lakelog.authorization') };
session.user = sessionStorage.getItem('lakelog.user');

export function setCredentials(authorization, user) {
  session.authorization = authorization;
  session.user = user;
  if (authorization) {
    sessionStorage.setItem('lakelog.authorization', authorization);
    sessionStorage.setItem('lakelog.user', user);
  } else {
    sessionStorage.removeItem('lakelog.authorization');
    sessionStorage.removeItem('lakelog.user');
  }
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const listeners = new Set();
const GET_RETRIES = 5;        // attempts of a GET answered 503 (not ready), RETRY_WAIT_MS apart
const RETRY_WAIT_MS = 1000;
export const onUnauthenticated = (fn) => { listeners.add(fn); return () => listeners.delete(fn); };

// One call of the node's HTTP API. Answers the parsed JSON (or, with raw, {body, headers});
// a refusal throws ApiError carrying the node's own error_code and message.
export async function api(method, path, body, { accept = 'application/json', contentType = 'application/json',
                                                raw = false, signal } = {}) {
  // X-Requested-With: a refused login is answered without the challenge that opens the browser's own dialog.
  const headers = { Accept: accept, 'X-Requested-With': 'lakelog-console' };
  if (session.authorization) headers.Authorization = session.authorization;
  const init = { method, headers, signal };
  if (body !== undefined) {
    headers['Content-Type'] = contentType;
    init.body = JSON.stringify(body);
  }
  let resp;
  for (let attempt = 1; ; attempt++) {
    try {
      resp = await fetch(path, init);
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError(0, 0, `the node did not answer (${e.message})`);
    }
    // 503: the node is catching up or re-confirming its session for a moment; a read is asked again.
    if (resp.status !== 503 || method !== 'GET' || attempt >= GET_RETRIES) break;
    await new Promise((done) => setTimeout(done, RETRY_WAIT_MS));
  }
  if (!resp.ok) {
    let code = resp.status, message = resp.statusText;
    try {
      const doc = await resp.json();
      code = doc.error_code ?? code;
      message = doc.message ?? message;
    } catch { /* not JSON: keep the status line */ }
    if (resp.status === 401) listeners.forEach((fn) => fn(message));
    throw new ApiError(resp.status, code, message);
  }
  const text = await resp.text(); // a 201 or 204 may have no body
  const doc = text ? JSON.parse(text) : null;
  return raw ? { body: doc, headers: resp.headers } : doc;
}

export const v3 = (path) => `/v3/clusters/${encodeURIComponent(session.clusterId)}${path}`;
export const enc = encodeURIComponent;

// ---------------------------------------------------------------- formatting

export function fmtBytes(n) {
  if (n == null) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export const fmtNum = (n) => (n == null ? '–' : Number(n).toLocaleString('en-US'));
export const fmtTime = (ms) => (ms == null || ms < 0 ? '–' : new Date(ms).toISOString().replace('T', ' ').replace('Z', ''));

export function fmtMs(ms) {
  if (ms == null || ms === '') return '–';
  const n = Number(ms);
  if (n < 0) return 'forever';
  if (n % 86400000 === 0) return `${n / 86400000} d`;
  if (n % 3600000 === 0) return `${n / 3600000} h`;
  return `${fmtNum(n)} ms`;
}

// Topic names as Kafka allows them.
export const TOPIC_NAME = /^[a-zA-Z0-9._-]{1,249}$/;

export function parseIntField(text, { min = 0, max = Number.MAX_SAFE_INTEGER, name = 'value' } = {}) {
  const s = String(text).trim();
  if (!/^-?\d+$/.test(s)) throw new Error(`${name} must be a whole number`);
  const n = Number(s);
  if (n < min || n > max) throw new Error(`${name} must be between ${fmtNum(min)} and ${fmtNum(max)}`);
  return n;
}

// ---------------------------------------------------------------- hooks

// Calls load() now and every intervalMs; [data, error, reload]. The last good data stays on an error.
export function usePoll(load, intervalMs, deps = []) {
  const [state, setState] = useState({ data: null, error: null });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let stopped = false, timer = null;
    const run = async () => {
      try {
        const data = await load();
        if (!stopped) setState({ data, error: null });
      } catch (e) {
        if (!stopped) setState((s) => ({ data: s.data, error: e }));
      }
      if (!stopped && intervalMs) timer = setTimeout(run, intervalMs);
    };
    run();
    return () => { stopped = true; clearTimeout(timer); };
  }, [...deps, tick]);
  return [state.data, state.error, () => setTick((t) => t + 1)];
}

// ---------------------------------------------------------------- components

export const ErrorBox = ({ error }) => error && html`
  <div class="error" role="alert">${error.code ? html`<b>${error.code}</b> ` : ''}${error.message}</div>`;

export const Link = ({ to, children, ...rest }) => html`<a href=${'#' + to} ...${rest}>${children}</a>`;

export function Pager({ offset, limit, total, onPage }) {
  const last = Math.min(offset + limit, total);
  return html`<div class="pager">
    <button disabled=${offset === 0} onClick=${() => onPage(Math.max(0, offset - limit))}>◀ Previous</button>
    <span>${total ? `${fmtNum(offset + 1)}–${fmtNum(last)} of ${fmtNum(total)}` : 'none'}</span>
    <button disabled=${last >= total} onClick=${() => onPage(offset + limit)}>Next ▶</button>
  </div>`;
}

// A form whose submit runs an async action: validation errors and the node's refusals are shown in place.
export function ActionForm({ onSubmit, submit, children, class: cls = '', ...rest }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const [done, setDone] = useState(null);
  const handler = async (e) => {
    e.preventDefault();
    setError(null);
    setDone(null);
    setBusy(true);
    try {
      setDone(await onSubmit(new FormData(e.target), e.target) || null);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return html`<form class=${'action ' + cls} onSubmit=${handler} novalidate ...${rest}>
    ${children}
    <button type="submit" disabled=${busy}>${submit}</button>
    <${ErrorBox} error=${error} />
    ${done && html`<div class="done" role="status">${done}</div>`}
  </form>`;
}
