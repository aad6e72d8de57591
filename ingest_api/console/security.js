// Security: users, API keys, ACLs and quota overrides, through the v3 API (DESCRIBE on the cluster to
// see them, ALTER to change them: a user without those rights sees the node's refusal in place).
import { useState } from 'preact/hooks';
import { ActionForm, ErrorBox, api, enc, html, parseIntField, usePoll, v3 } from './lib.js';

const RESOURCE_TYPES = ['TOPIC', 'GROUP', 'CLUSTER'];
const OPERATIONS = ['ALL', 'READ', 'WRITE', 'CREATE', 'DELETE', 'ALTER', 'DESCRIBE'];
const PRINCIPAL = /^User:.+$/;

function Users() {
  const [data, error, reload] = usePoll(() => api('GET', v3('/users')), 0);
  const create = async (form) => {
    const name = String(form.get('name')).trim();
    const password = String(form.get('password'));
    if (!/^[A-Za-z0-9._@-]{1,128}$/.test(name)) throw new Error('a user name is 1 to 128 letters, digits, ".", "_", "@" or "-"');
    if (!password) throw new Error('enter a password');
    await api('POST', v3('/users'), { name, password });
    reload();
    return `user ${name} saved`;
  };
  const remove = async (name) => {
    if (!confirm(`Delete user ${name}?`)) return;
    await api('DELETE', v3(`/users/${enc(name)}`)).catch((e) => alert(e.message));
    reload();
  };
  return html`<h2>Users</h2><${ErrorBox} error=${error} />
    ${data && html`<table id="users" class="compact"><thead><tr><th>User</th><th>Mechanism</th><th></th></tr></thead>
      <tbody>${data.data.map((u) => html`<tr><td>${u.name}</td><td>${u.mechanism}</td>
        <td><button class="link" onClick=${() => remove(u.name)}>delete</button></td></tr>`)}</tbody></table>`}
    <${ActionForm} onSubmit=${create} submit="Create or change password" id="create-user" class="inline">
      <label>User <input name="name" autocomplete="off" /></label>
      <label>Password <input name="password" type="password" autocomplete="new-password" /></label>
    <//>`;
}

function ApiKeys() {
  const [data, error, reload] = usePoll(() => api('GET', v3('/api-keys')), 0);
  const create = async (form) => {
    const principal = String(form.get('principal')).trim();
    if (!PRINCIPAL.test(principal)) throw new Error('a principal is User:<name>');
    const key = await api('POST', v3('/api-keys'), { principal });
    reload();
    return html`API key for ${principal} (shown once): <code id="new-key">${key.api_key}</code>`;
  };
  return html`<h2>API keys</h2><${ErrorBox} error=${error} />
    ${data && html`<table id="api-keys" class="compact"><thead><tr><th>Key id</th><th>Principal</th></tr></thead>
      <tbody>${data.data.map((k) => html`<tr><td>${k.key_id}</td><td>${k.principal}</td></tr>`)}</tbody></table>`}
    <${ActionForm} onSubmit=${create} submit="Create an API key" id="create-key" class="inline">
      <label>Principal <input name="principal" placeholder="User:name" /></label>
    <//>`;
}

function Acls() {
  const [data, error, reload] = usePoll(() => api('GET', v3('/acls')), 0);
  const [removeError, setRemoveError] = useState(null);
  const create = async (form) => {
    const acl = Object.fromEntries(['principal', 'resource_type', 'resource_name', 'pattern_type', 'operation',
                                    'permission'].map((k) => [k, String(form.get(k)).trim()]));
    if (!PRINCIPAL.test(acl.principal)) throw new Error('a principal is User:<name> (or User:*)');
    if (!acl.resource_name) throw new Error('name the resource (or *)');
    await api('POST', v3('/acls'), { ...acl, host: '*' });
    reload();
    return 'ACL created';
  };
  const remove = async (a) => {
    setRemoveError(null);
    const q = new URLSearchParams({ resource_type: a.resource_type, resource_name: a.resource_name,
      pattern_type: a.pattern_type, principal: a.principal, host: a.host, operation: a.operation, permission: a.permission });
    try {
      await api('DELETE', v3(`/acls?${q}`));
      reload();
    } catch (e) {
      setRemoveError(e);
    }
  };
  return html`<h2>ACLs</h2><${ErrorBox} error=${error || removeError} />
    ${data && html`<table id="acls" class="compact"><thead><tr><th>Principal</th><th>Permission</th><th>Operation</th>
      <th>Resource</th><th>Pattern</th><th></th></tr></thead>
      <tbody>${data.data.map((a) => html`<tr><td>${a.principal}</td><td>${a.permission}</td><td>${a.operation}</td>
        <td>${a.resource_type} ${a.resource_name}</td><td>${a.pattern_type}</td>
        <td><button class="link" onClick=${() => remove(a)}>delete</button></td></tr>`)}</tbody></table>`}
    <${ActionForm} onSubmit=${create} submit="Add ACL" id="create-acl" class="inline">
      <label>Principal <input name="principal" placeholder="User:name" /></label>
      <label>Permission <select name="permission"><option>ALLOW</option><option>DENY</option></select></label>
      <label>Operation <select name="operation">${OPERATIONS.map((o) => html`<option>${o}</option>`)}</select></label>
      <label>Resource <select name="resource_type">${RESOURCE_TYPES.map((o) => html`<option>${o}</option>`)}</select></label>
      <label>Name <input name="resource_name" placeholder="orders, or *" /></label>
      <label>Pattern <select name="pattern_type"><option>LITERAL</option><option>PREFIXED</option></select></label>
    <//>`;
}

const QUOTA_KEYS = [['producer.byte.rate', 'Produce bytes/s'], ['consumer.byte.rate', 'Fetch bytes/s'], ['request.rate', 'Requests/s']];

function Quotas() {
  const [data, error, reload] = usePoll(() => api('GET', v3('/quotas')), 0);
  const [removeError, setRemoveError] = useState(null);
  const set = async (form) => {
    const principal = String(form.get('principal')).trim();
    if (!PRINCIPAL.test(principal)) throw new Error('a principal is User:<name>');
    const quotas = {};
    for (const [k, label] of QUOTA_KEYS) {
      const text = String(form.get(k)).trim();
      if (text) quotas[k] = parseIntField(text, { min: 0, max: 2147483647, name: label });
    }
    if (!Object.keys(quotas).length) throw new Error('give at least one rate (0 = unlimited)');
    const doc = await api('PUT', v3(`/quotas/${enc(principal)}`), quotas);
    reload();
    return `quotas of ${doc.principal}: ${Object.entries(doc.quotas).map(([k, v]) => `${k}=${v}`).join(', ')}`;
  };
  const remove = async (principal) => {
    setRemoveError(null);
    try {
      await api('DELETE', v3(`/quotas/${enc(principal)}`));
      reload();
    } catch (e) {
      setRemoveError(e);
    }
  };
  return html`<h2>Quota overrides</h2><${ErrorBox} error=${error || removeError} />
    ${data && (data.data.length === 0 ? html`<p class="muted" id="no-quotas">None: every principal has the nodes' default quotas.</p>` : html`
      <table id="quotas" class="compact"><thead><tr><th>Principal</th><th>Quotas</th><th></th></tr></thead>
      <tbody>${data.data.map((q) => html`<tr data-principal=${q.principal}><td>${q.principal}</td>
        <td>${Object.entries(q.quotas).map(([k, v]) => `${k}=${v}`).join(', ')}</td>
        <td><button class="link" onClick=${() => remove(q.principal)}>remove</button></td></tr>`)}</tbody></table>`)}
    <${ActionForm} onSubmit=${set} submit="Set quotas" id="set-quotas" class="inline">
      <label>Principal <input name="principal" placeholder="User:name" /></label>
      ${QUOTA_KEYS.map(([k, label]) => html`<label>${label} <input name=${k} placeholder="default" inputmode="numeric" size="10" /></label>`)}
    <//>
    <p class="muted">0 means unlimited; setting replaces the principal's overrides, and a rate left empty falls back to the nodes' default. Each node enforces the rates on its own.</p>`;
}

export function Security() {
  return html`<h1>Security</h1>
    <p class="muted">Users, API keys, ACLs and quotas are kept in the cluster metadata: a change here applies on every node.</p>
    <${Users} /><${ApiKeys} /><${Acls} /><${Quotas} />`;
}
