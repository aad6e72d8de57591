// Consumer groups: the list; a group's state, members, committed offsets and lag (charted), and an
// offset reset that always shows its dry run before it commits anything.
import { useRef, useState } from 'preact/hooks';
import { Chart } from './chart.js';
import { ActionForm, ErrorBox, Link, api, enc, fmtNum, html, parseIntField, usePoll } from './lib.js';

const POLL_MS = 2000;
const KEEP_SAMPLES = 150;

export function GroupList() {
  const [data, error] = usePoll(() => api('GET', '/groups'), 5000);
  return html`<h1>Consumer groups</h1><${ErrorBox} error=${error} />
    ${data && (data.groups.length === 0 ? html`<p class="muted">No consumer groups yet.</p>` : html`
      <table id="groups"><thead><tr><th>Group</th><th>State</th><th>Protocol</th></tr></thead>
      <tbody>${data.groups.map((g) => html`<tr data-group=${g.group_id}><td><${Link} to=${`/groups/${enc(g.group_id)}`}>${g.group_id}<//></td>
        <td>${g.state}</td><td>${g.protocol_type || '–'}</td></tr>`)}</tbody></table>`)}`;
}

// The offsets a reset would commit, per partition of the topic (nothing is sent but reads).
async function planReset(group, form) {
  const topic = String(form.get('topic')).trim();
  const strategy = String(form.get('strategy'));
  const arg = String(form.get('arg')).trim();
  if (!topic) throw new Error('choose a topic');
  let ts = null, to = null;
  if (strategy === 'offset') to = parseIntField(arg, { min: 0, name: 'offset' });
  if (strategy === 'timestamp') {
    ts = Date.parse(arg.replace(' ', 'T') + (/[zZ]$/.test(arg) ? '' : 'Z'));
    if (!arg || Number.isNaN(ts)) throw new Error('a timestamp is like 2026-01-31 12:00:00 (UTC)');
  }
  const t = await api('GET', `/topics/${enc(topic)}`);
  const current = new Map(group.partitions.filter((p) => p.topic === topic).map((p) => [p.partition, p.current_offset]));
  const rows = [];
  for (const p of t.partitions) {
    const id = p.partition;
    const b = await api('GET', `/topics/${enc(topic)}/partitions/${id}/offsets${ts != null ? `?timestamp=${ts}` : ''}`);
    let target = strategy === 'earliest' ? b.beginning_offset : strategy === 'latest' ? b.end_offset
      : strategy === 'timestamp' ? (b.offset ?? b.end_offset) : to;
    target = Math.max(b.beginning_offset, Math.min(target, b.end_offset));
    rows.push({ topic, partition: id, from: current.get(id) ?? null, offset: target });
  }
  return rows;
}

function ResetOffsets({ group, onDone }) {
  const [plan, setPlan] = useState(null);
  const topics = [...new Set(group.partitions.map((p) => p.topic))];
  const dryRun = async (form) => {
    setPlan(null);
    if (group.members.length) throw new Error(`the group has ${group.members.length} active member(s): stop them first`);
    const rows = await planReset(group, form);
    setPlan(rows);
    return 'dry run: nothing committed yet';
  };
  const execute = async () => {
    await api('POST', `/groups/${enc(group.group_id)}/offsets`,
              { offsets: plan.map(({ topic, partition, offset }) => ({ topic, partition, offset })) });
    setPlan(null);
    onDone();
    return 'offsets committed';
  };
  return html`<details class="panel"><summary>Reset offsets</summary>
    <${ActionForm} onSubmit=${dryRun} submit="Dry run" id="reset-plan" class="inline">
      <label>Topic <input name="topic" list="group-topics" value=${topics[0] || ''} /></label>
      <datalist id="group-topics">${topics.map((t) => html`<option>${t}</option>`)}</datalist>
      <label>To <select name="strategy"><option value="earliest">earliest</option><option value="latest">latest</option>
        <option value="offset">offset</option><option value="timestamp">timestamp (UTC)</option></select></label>
      <input name="arg" placeholder="offset or timestamp" />
    <//>
    ${plan && html`<table id="reset-preview" class="compact"><thead><tr><th>Partition</th><th>Committed</th><th>New</th></tr></thead>
      <tbody>${plan.map((r) => html`<tr><td>${r.topic}-${r.partition}</td><td>${r.from ?? '–'}</td><td>${r.offset}</td></tr>`)}</tbody></table>
      <${ActionForm} onSubmit=${execute} submit="Commit these offsets" id="reset-execute" class="inline danger" />`}
  </details>`;
}

export function GroupPage({ name }) {
  const lag = useRef({ xs: [], total: [] });
  const [group, error, reload] = usePoll(async () => {
    const g = await api('GET', `/groups/${enc(name)}`);
    const h = lag.current;
    h.xs.push(Date.now() / 1000);
    h.total.push(g.partitions.reduce((sum, p) => sum + (p.lag ?? 0), 0));
    if (h.xs.length > KEEP_SAMPLES) { h.xs.shift(); h.total.shift(); }
    return g;
  }, POLL_MS, [name]);
  if (!group) return html`<h1>Group ${name}</h1><${ErrorBox} error=${error} />`;
  const total = group.partitions.reduce((sum, p) => sum + (p.lag ?? 0), 0);
  return html`<h1>Group ${name}</h1><${ErrorBox} error=${error} />
    <p>State <b id="group-state">${group.state}</b> · generation ${group.generation} · coordinator node ${group.coordinator} ·
      assignor ${group.partition_assignor || '–'} · total lag <b id="total-lag">${fmtNum(total)}</b></p>
    <${Chart} title="Lag" unit="records" series=${['total lag']} data=${[lag.current.xs, lag.current.total]} />
    <h2>Members</h2>
    ${group.members.length === 0 ? html`<p class="muted">No active members.</p>` : html`
      <table id="members" class="compact"><thead><tr><th>Member</th><th>Client</th><th>Host</th><th>Assignment</th></tr></thead>
      <tbody>${group.members.map((m) => html`<tr><td>${m.member_id}</td><td>${m.client_id}</td><td>${m.host}</td>
        <td>${m.assignment.map((a) => `${a.topic}-${a.partition}`).join(', ')}</td></tr>`)}</tbody></table>`}
    <h2>Partitions</h2>
    <table id="lag"><thead><tr><th>Partition</th><th>Committed offset</th><th>Log end offset</th><th>Lag</th><th>Member</th></tr></thead>
    <tbody>${group.partitions.map((p) => html`<tr data-tp=${`${p.topic}-${p.partition}`}>
      <td><${Link} to=${`/topics/${enc(p.topic)}`}>${p.topic}<//>-${p.partition}</td><td>${fmtNum(p.current_offset)}</td>
      <td>${fmtNum(p.log_end_offset)}</td><td class="lag">${fmtNum(p.lag)}</td><td>${p.consumer_id || '–'}</td></tr>`)}</tbody></table>
    <${ResetOffsets} group=${group} onDone=${reload} />`;
}
