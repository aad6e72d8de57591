// The console's shell: the session (login when the node asks for credentials), the navigation and
// a hash router (#/topics/orders...), so every page has a link and the node serves one HTML file.
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, ActionForm, ErrorBox, api, html, onUnauthenticated, session, setCredentials } from './lib.js';
import { Overview } from './overview.js';
import { TopicList, TopicPage } from './topics.js';
import { MessageBrowser } from './messages.js';
import { GroupList, GroupPage } from './groups.js';
import { Security } from './security.js';
import { JobList, JobRun } from './jobs.js';
import { SqlPage } from './sql.js';

const ROUTES = [
  [/^\/$/, () => html`<${Overview} />`],
  [/^\/topics$/, () => html`<${TopicList} />`],
  [/^\/topics\/([^/]+)$/, (m) => html`<${TopicPage} name=${decodeURIComponent(m[1])} />`],
  [/^\/topics\/([^/]+)\/messages$/, (m) => html`<${MessageBrowser} name=${decodeURIComponent(m[1])} />`],
  [/^\/groups$/, () => html`<${GroupList} />`],
  [/^\/groups\/([^/]+)$/, (m) => html`<${GroupPage} name=${decodeURIComponent(m[1])} />`],
  [/^\/jobs$/, () => html`<${JobList} />`],
  [/^\/jobs\/([^/]+)$/, (m) => html`<${JobRun} id=${decodeURIComponent(m[1])} />`],
  [/^\/sql$/, () => html`<${SqlPage} />`],
  [/^\/security$/, () => html`<${Security} />`],
];

const NAV = [['/', 'Overview'], ['/topics', 'Topics'], ['/groups', 'Consumer groups'], ['/jobs', 'Jobs'], ['/sql', 'SQL'], ['/security', 'Security']];

function useHashPath() {
  const read = () => (location.hash.replace(/^#/, '').split('?')[0] || '/');
  const [path, setPath] = useState(read());
  useEffect(() => {
    const on = () => setPath(read());
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return path;
}

function Login({ reason, onLogin }) {
  const submit = async (form) => {
    const user = String(form.get('user') || '').trim();
    const password = String(form.get('password') || '');
    const key = String(form.get('apikey') || '').trim();
    let authorization, who;
    if (key) {
      authorization = `Bearer ${key}`;
      who = 'API key';
    } else {
      if (!user) throw new Error('enter a user name and password, or an API key');
      if (!password) throw new Error('enter the password');
      if (user.includes(':')) throw new Error('a user name cannot contain ":"');
      authorization = 'Basic ' + btoa(String.fromCharCode(...new TextEncoder().encode(`${user}:${password}`)));
      who = user;
    }
    setCredentials(authorization, who);
    try {
      await api('GET', '/stats/topics?limit=1'); // 401 when the credentials are wrong
    } catch (e) {
      if (e.status !== 403) { // 403: who they are is known, only this list is not theirs to see
        setCredentials(null, null);
        throw e;
      }
    }
    onLogin();
  };
  return html`<main class="login">
    <h1>Lakelog</h1>
    <p>This cluster asks for credentials${reason ? html` <span class="muted">(${reason})</span>` : ''}.</p>
    <${ActionForm} onSubmit=${submit} submit="Log in" id="login">
      ${session.basic && html`<label>User <input name="user" autocomplete="username" /></label>
        <label>Password <input name="password" type="password" autocomplete="current-password" /></label>`}
      ${session.apikey && html`<label>or API key <input name="apikey" autocomplete="off" /></label>`}
    <//>
  </main>`;
}

function App() {
  const path = useHashPath();
  const [loggedIn, setLoggedIn] = useState(!session.authentication || !!session.authorization);
  const [reason, setReason] = useState('');
  useEffect(() => onUnauthenticated((message) => {
    if (!session.authentication) return;
    setCredentials(null, null);
    setReason(message);
    setLoggedIn(false);
  }), []);
  if (!loggedIn) return html`<${Login} reason=${reason} onLogin=${() => { setReason(''); setLoggedIn(true); }} />`;
  const route = ROUTES.map(([re, page]) => [re.exec(path), page]).find(([m]) => m);
  const section = '/' + (path.split('/')[1] || '');
  return html`<div class="shell">
    <header>
      <a class="brand" href="#/">Lakelog</a>
      <nav>${NAV.map(([to, label]) => html`<a href=${'#' + to} class=${section === to ? 'active' : ''}>${label}</a>`)}</nav>
      <span class="who">${session.clusterId}${session.authentication && html` · ${session.user}
        <button class="link" onClick=${() => { setCredentials(null, null); setLoggedIn(false); }}>Log out</button>`}</span>
    </header>
    <main>${route ? route[1](route[0]) : html`<h1>Not found</h1><p>No page at ${path}.</p>`}</main>
  </div>`;
}

async function start() {
  const root = document.getElementById('app');
  try {
    const resp = await fetch('/console/session.json', { headers: { Accept: 'application/json' } });
    const doc = await resp.json();
    Object.assign(session, { authentication: doc.authentication, basic: doc.basic, apikey: doc.apikey,
                             clusterId: doc.cluster_id, downloadMaxRecords: doc.download_max_records,
                             downloadMaxBytes: doc.download_max_bytes });
  } catch (e) {
    render(html`<${ErrorBox} error=${new ApiError(0, 0, `the node did not describe its session: ${e.message}`)} />`, root);
    return;
  }
  root.textContent = '';
  render(html`<${App} />`, root);
}

start();
