// Topics: a paged, searchable list with create; a topic page with its partitions, configs and actions.
import { useState } from 'preact/hooks';
import { ActionForm, ErrorBox, Link, Pager, TOPIC_NAME, api, enc, fmtBytes, fmtMs, fmtNum, html, parseIntField,
         usePoll, v3 } from './lib.js';

const PAGE = 50;

function CreateTopic({ onCreated }) {
  const submit = async (form) => {
    const name = String(form.get('name')).trim();
    if (!TOPIC_NAME.test(name) || name === '.' || name === '..') {
      throw new Error('a topic name is 1 to 249 letters, digits, ".", "_" or "-"');
    }
    const partitions = parseIntField(form.get('partitions'), { min: 1, max: 100000, name: 'partitions' });
    const rf = String(form.get('rf')).trim();
    const configs = [{ name: 'cleanup.policy', value: String(form.get('cleanup')) }];
    const retention = String(form.get('retention')).trim();
    if (retention) configs.push({ name: 'retention.ms', value: String(parseIntField(retention, { min: -1, name: 'retention.ms' })) });
    if (form.get('remote')) configs.push({ name: 'remote.storage.enable', value: 'true' });
    await api('POST', v3('/topics'), { topic_name: name, partitions_count: partitions,
      replication_factor: rf ? parseIntField(rf, { min: 1, max: 16, name: 'replication factor' }) : undefined, configs });
    onCreated(name);
    return `created ${name}`;
  };
  return html`<details class="panel"><summary>Create a topic</summary>
    <${ActionForm} onSubmit=${submit} submit="Create" id="create-topic">
      <label>Name <input name="name" required /></label>
      <label>Partitions <input name="partitions" value="3" inputmode="numeric" /></label>
      <label>Replication factor <input name="rf" placeholder="default" inputmode="numeric" /></label>
      <label>Cleanup policy <select name="cleanup"><option>delete</option><option>compact</option><option value="compact,delete">compact,delete</option></select></label>
      <label>retention.ms <input name="retention" placeholder="default" inputmode="numeric" /></label>
      <label class="check"><input type="checkbox" name="remote" /> Remote tier</label>
    <//></details>`;
}

export function TopicList() {
  const [offset, setOffset] = useState(0);
  const [search, setSearch] = useState('');
  const [data, error, reload] = usePoll(
    () => api('GET', `/stats/topics?offset=${offset}&limit=${PAGE}&search=${enc(search)}`), 5000, [offset, search]);
  return html`<h1>Topics</h1>
    <${CreateTopic} onCreated=${(name) => { setSearch(''); reload(); location.hash = `#/topics/${enc(name)}`; }} />
    <div class="toolbar"><input type="search" placeholder="Filter topics" value=${search} maxlength="249"
      onInput=${(e) => { setSearch(e.target.value); setOffset(0); }} />
      ${data && html`<${Pager} offset=${offset} limit=${PAGE} total=${data.total} onPage=${setOffset} />`}</div>
    <${ErrorBox} error=${error} />
    ${data && data.total === 0 && html`<p class="muted" id="no-topics">${search ? 'No topic matches.' : 'No topics yet: create one above.'}</p>`}
    ${data && data.total > 0 && html`<table id="topics"><thead><tr><th>Topic</th><th>Partitions</th><th>Replication</th>
      <th>Under-replicated</th><th>Cleanup</th><th>Retention</th><th>Local size</th><th>Remote size</th></tr></thead>
      <tbody>${data.topics.map((t) => html`<tr data-topic=${t.topic}>
        <td><${Link} to=${`/topics/${enc(t.topic)}`}>${t.topic}<//></td><td>${t.partitions}</td><td>${t.replication_factor}</td>
        <td class=${t.under_replicated ? 'warn' : ''}>${t.under_replicated}</td><td>${t.configs['cleanup.policy']}</td>
        <td>${fmtMs(t.configs['retention.ms'])}</td><td>${fmtBytes(t.local_bytes)}</td>
        <td>${t.configs['remote.storage.enable'] === 'true' ? fmtBytes(t.remote_bytes) : 'not tiered'}</td></tr>`)}
      </tbody></table>
      ${data.unreachable_nodes.length > 0 && html`<p class="muted">Sizes leave out nodes ${data.unreachable_nodes.join(', ')}, which did not answer.</p>`}`}`;
}

function Partitions({ detail }) {
  const tiered = detail.configs['remote.storage.enable'] === 'true';
  return html`<table id="partitions"><thead><tr><th>Partition</th><th>Leader</th><th>Epoch</th><th>Replicas</th><th>ISR</th>
    <th>Log start</th><th>High watermark</th><th>Last stable</th><th>Open transactions</th><th>Log end</th><th>Local</th>${tiered && html`<th>Remote</th><th>Waiting to tier</th>`}</tr></thead>
    <tbody>${detail.partitions.map((p) => html`<tr data-partition=${p.partition}>
      <td>${p.partition}</td><td>${p.leader < 0 ? 'none' : p.leader}</td><td>${p.leader_epoch}</td>
      <td>${p.replicas.join(', ')}</td><td class=${p.isr.length < p.replicas.length ? 'warn' : ''}>${p.isr.join(', ')}</td>
      <td>${fmtNum(p.log_start_offset)}</td><td>${fmtNum(p.high_watermark)}</td>
      <td class=${p.last_stable_offset < p.high_watermark ? 'warn' : ''}>${fmtNum(p.last_stable_offset)}</td>
      <td>${p.ongoing_transactions == null ? '–' : p.ongoing_transactions}</td><td>${fmtNum(p.log_end_offset)}</td>
      <td>${p.local_bytes == null ? '–' : `${fmtBytes(p.local_bytes)} in ${p.local_segments} segment(s)`}</td>
      ${tiered && html`<td>${p.remote?.error ? p.remote.error : p.remote ? `${fmtBytes(p.remote.size_bytes)} in ${p.remote.segments} segment(s), offsets ${fmtNum(p.remote.log_start_offset)}–${fmtNum(p.remote.tiered_end_offset)}` : '–'}</td>
        <td>${p.remote && !p.remote.error ? fmtBytes(p.remote.local_only_bytes) : '–'}</td>`}</tr>`)}
    </tbody></table>`;
}

function Configs({ name, configs, onChange }) {
  const submit = async (form) => {
    const key = String(form.get('name'));
    const value = String(form.get('value')).trim();
    if (!configs.some((c) => c.name === key)) throw new Error(`${key} is not a topic config`);
    if (value === '') {
      await api('DELETE', v3(`/topics/${enc(name)}/configs/${enc(key)}`));
      onChange();
      return `${key} reset to its default`;
    }
    await api('PUT', v3(`/topics/${enc(name)}/configs/${enc(key)}`), { value });
    onChange();
    return `${key} = ${value}`;
  };
  return html`<h2>Configs</h2>
    <${ActionForm} onSubmit=${submit} submit="Set" id="alter-config" class="inline">
      <label>Config <select name="name">${configs.map((c) => html`<option>${c.name}</option>`)}</select></label>
      <label>Value <input name="value" placeholder="empty: back to the default" maxlength="4096" /></label>
    <//>
    <table id="configs" class="compact"><thead><tr><th>Name</th><th>Value</th><th>Source</th></tr></thead>
    <tbody>${configs.map((c) => html`<tr class=${c.is_default ? 'muted' : ''}><td>${c.name}</td><td>${c.value}</td>
      <td>${c.is_default ? 'default' : 'set on the topic'}</td></tr>`)}</tbody></table>`;
}

function Actions({ name, partitions, onChange }) {
  const [confirm, setConfirm] = useState(false);
  const addPartitions = async (form) => {
    const n = parseIntField(form.get('count'), { min: partitions + 1, max: 100000, name: 'the new partition count' });
    await api('PATCH', v3(`/topics/${enc(name)}`), { partitions_count: n });
    onChange();
    return `${name} now has ${n} partitions`;
  };
  const remove = async (form) => {
    if (String(form.get('confirm')) !== name) throw new Error(`type ${name} to confirm`);
    await api('DELETE', v3(`/topics/${enc(name)}`));
    location.hash = '#/topics';
  };
  return html`<h2>Actions</h2>
    <${ActionForm} onSubmit=${addPartitions} submit="Add partitions" id="add-partitions" class="inline">
      <label>New partition count <input name="count" value=${partitions + 1} inputmode="numeric" /></label>
    <//>
    ${confirm
      ? html`<${ActionForm} onSubmit=${remove} submit="Delete for good" id="delete-topic" class="inline danger">
          <label>Type <b>${name}</b> to delete it and all its records <input name="confirm" autocomplete="off" /></label>
        <//>`
      : html`<button class="danger" id="delete" onClick=${() => setConfirm(true)}>Delete topic…</button>`}`;
}

export function TopicPage({ name }) {
  const [detail, error, reload] = usePoll(() => api('GET', `/stats/topics/${enc(name)}`), 5000, [name]);
  const [configs, cerror, reloadConfigs] = usePoll(
    async () => (await api('GET', v3(`/topics/${enc(name)}/configs`))).data, 0, [name]);
  return html`<h1>Topic ${name}</h1>
    <p><${Link} to=${`/topics/${enc(name)}/messages`} class="button" id="browse">Browse messages<//></p>
    <${ErrorBox} error=${error} />
    ${detail && html`<p class="muted">id ${detail.topic_id} · ${detail.partitions.length} partitions ·
      replication factor ${detail.replication_factor} · ${detail.configs['cleanup.policy']} ·
      retention ${fmtMs(detail.configs['retention.ms'])}</p>
      <${Partitions} detail=${detail} />
      <${Actions} name=${name} partitions=${detail.partitions.length} onChange=${reload} />`}
    <${ErrorBox} error=${cerror} />
    ${configs && html`<${Configs} name=${name} configs=${configs} onChange=${() => { reloadConfigs(); reload(); }} />`}`;
}
