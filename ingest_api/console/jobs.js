// Spark jobs: the runs recorded in the remote tier (/jobs/runs), the scheduler's heartbeat, a form
// that asks for a run (a scheduler claims it), a run's page with its progress, figures and log, and
// Cancel for a run not finished (a queued one at once; a running one's runner stops it within seconds).
import { useState } from 'preact/hooks';
import { ActionForm, ErrorBox, Link, TOPIC_NAME, api, enc, fmtNum, fmtTime, html, usePoll } from './lib.js';

const POLL_MS = 2000;
const DONE = new Set(['SUCCEEDED', 'FAILED', 'LOST', 'CANCELLED']);
const BADGE = { SUCCEEDED: 'ok', FAILED: 'down', LOST: 'down', RUNNING: 'warn', QUEUED: 'warn', CANCELLED: 'down' };

export const fmtSeconds = (s) => (s == null ? '–' : s < 60 ? `${s.toFixed(1)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`);
const duration = (r) => (r.seconds != null ? fmtSeconds(r.seconds) : r.elapsed_s != null ? `${fmtSeconds(r.elapsed_s)} so far` : '–');
const progress = (r) => (r.tasks_total == null ? '–' : `${fmtNum(r.tasks_done)} / ${fmtNum(r.tasks_total)}`);
const figures = (totals) => Object.entries(totals || {}).map(([k, v]) => `${k.replaceAll('_', ' ')} ${fmtNum(v)}`).join(', ') || '–';
const cell = (v) => (typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(2) : v ?? '');
const State = ({ state, cancelling }) => html`<span class=${'badge ' + (BADGE[state] || '')}>${state.toLowerCase()}</span>${cancelling ? html` <span class="muted">cancelling…</span>` : ''}`;

// Cancel: a queued (or lost) run is cancelled at once, a running one when its runner next reports.
function CancelButton({ run, onDone }) {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  if (run.state === 'SUCCEEDED' || run.state === 'FAILED' || run.state === 'CANCELLED') return null;
  const cancel = async () => {
    if (!window.confirm(`Cancel run ${run.id} (${run.job})?`)) return;
    setBusy(true);
    setError(null);
    try {
      await api('POST', `/jobs/runs/${enc(run.id)}/cancel`);
      onDone();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return html`<span class="cancel"><button class="danger" data-cancel=${run.id} disabled=${busy || run.cancel_requested}
      onClick=${cancel}>${run.cancel_requested ? 'Cancelling…' : 'Cancel'}</button><${ErrorBox} error=${error} /></span>`;
}

function Scheduler({ scheduler }) {
  if (scheduler && scheduler.alive) {
    const timed = Object.entries(scheduler.intervals_s || {}).map(([j, s]) => `${j} every ${s} s`).join(', ');
    return html`<p id="scheduler">Scheduler <b>${scheduler.runner}</b> is running
      (${timed || 'no timed jobs'}); it picks up the runs started here within seconds.</p>`;
  }
  const last = scheduler ? ` (last heard from ${fmtTime(scheduler.heartbeat_ms)})` : '';
  return html`<p id="scheduler" class="warn">No scheduler is running${last}: runs started here wait until${' '}
    <code>lakelog jobs schedule</code> or <code>lakelog up --jobs</code> runs over this remote tier;${' '}
    <code>lakelog jobs run</code> runs one at once and is listed here too.</p>`;
}

function StartRun({ jobs, onStarted }) {
  const submit = async (form) => {
    const job = String(form.get('job'));
    const text = String(form.get('topics') || '').trim();
    const topics = text ? text.split(/[\s,]+/).filter(Boolean) : null;
    for (const t of topics || []) if (!TOPIC_NAME.test(t)) throw new Error(`${t} is not a topic name`);
    if (topics && topics.length > 100) throw new Error('at most 100 topics');
    const run = await api('POST', '/jobs/runs', { job, topics });
    onStarted(run);
    return html`asked for ${job}: <${Link} to=${`/jobs/${run.id}`}>run ${run.id}<//>`;
  };
  return html`<details class="panel" open><summary>Start a run</summary>
    <${ActionForm} onSubmit=${submit} submit="Start" id="start-run">
      <label>Job <select name="job">${jobs.map((j) => html`<option>${j}</option>`)}</select></label>
      <label>Topics <input name="topics" placeholder="every topic" size="40" /></label>
    <//></details>`;
}

export function JobList() {
  const [data, error, reload] = usePoll(() => api('GET', '/jobs/runs?limit=50'), POLL_MS);
  if (!data) return html`<h1>Jobs</h1><${ErrorBox} error=${error} />${!error && html`<p class="muted">Loading…</p>`}`;
  return html`<h1>Jobs</h1>
    <p class="muted">Spark jobs over the remote tier: compaction, retention, rebuild-index and sync-tables.</p>
    <${Scheduler} scheduler=${data.scheduler} />
    <${StartRun} jobs=${data.jobs} onStarted=${reload} />
    <${ErrorBox} error=${error} />
    ${data.runs.length === 0 ? html`<p class="muted" id="no-runs">No runs recorded yet.</p>` : html`
    <table id="runs"><thead><tr><th>Run</th><th>Job</th><th>State</th><th>Topics</th><th>Requested</th>
      <th>Duration</th><th>Tasks</th><th>Figures</th><th>By</th><th></th></tr></thead>
    <tbody>${data.runs.map((r) => html`<tr data-run=${r.id} data-job=${r.job} data-state=${r.state}>
      <td><${Link} to=${`/jobs/${r.id}`}>${r.id}<//></td><td>${r.job}</td><td><${State} state=${r.state} cancelling=${r.cancel_requested} /></td>
      <td>${r.topics ? r.topics.join(', ') : html`<span class="muted">every topic</span>`}</td>
      <td>${fmtTime(r.requested_ms)}</td><td>${duration(r)}</td><td class="progress">${progress(r)}</td>
      <td class="figures">${figures(r.totals)}</td><td>${r.requested_by}</td>
      <td><${CancelButton} run=${r} onDone=${reload} /></td></tr>`)}</tbody></table>`}`;
}

export function JobRun({ id }) {
  const [data, error, reload] = usePoll(async () => api('GET', `/jobs/runs/${enc(id)}`), POLL_MS, [id]);
  if (!data) return html`<h1>Run ${id}</h1><${ErrorBox} error=${error} />${!error && html`<p class="muted">Loading…</p>`}`;
  const r = data;
  const cols = r.rows.length ? Object.keys(r.rows.reduce((a, row) => Object.assign(a, row), {})) : [];
  return html`<h1>Run ${r.id}</h1>
    <p><${Link} to="/jobs">← Jobs</${Link}></p>
    <${ErrorBox} error=${error} />
    <section class="cards">
      <div class="card"><b>${r.job}</b><span>job</span></div>
      <div class="card"><b id="run-state"><${State} state=${r.state} cancelling=${r.cancel_requested} /></b><span>state</span></div>
      <div class="card"><b id="run-tasks">${progress(r)}</b><span>tasks done</span></div>
      <div class="card"><b>${duration(r)}</b><span>duration</span></div>
    </section>
    ${r.state === 'QUEUED' && html`<p class="muted">Waiting for a scheduler to take it.</p>`}
    <${CancelButton} run=${r} onDone=${reload} />
    ${r.error && html`<div class="error" id="run-error">${r.error}</div>`}
    <table class="compact" id="run-facts"><tbody>
      <tr><th>Topics</th><td>${r.topics ? r.topics.join(', ') : 'every topic'}</td></tr>
      <tr><th>Requested</th><td>${fmtTime(r.requested_ms)} by ${r.requested_by}</td></tr>
      <tr><th>Started</th><td>${fmtTime(r.started_ms)}${r.runner ? ` on ${r.runner}` : ''}</td></tr>
      <tr><th>Finished</th><td>${fmtTime(r.finished_ms)}</td></tr>
      <tr><th>Figures</th><td id="run-totals">${figures(r.totals)}</td></tr>
    </tbody></table>
    ${DONE.has(r.state) && cols.length > 0 && html`<h2>What it did${r.rows_total > r.rows.length ? ` (first ${r.rows.length} of ${fmtNum(r.rows_total)})` : ''}</h2>
      <table class="compact" id="run-rows"><thead><tr>${cols.map((c) => html`<th>${c.replaceAll('_', ' ')}</th>`)}</tr></thead>
      <tbody>${r.rows.map((row) => html`<tr>${cols.map((c) => html`<td>${cell(row[c])}</td>`)}</tr>`)}</tbody></table>`}
    <h2>Log</h2>
    <pre id="run-log" class="log">${r.log.join('\n')}</pre>`;
}
