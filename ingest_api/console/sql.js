// SQL: an editor, results as a table, and a bar chart when a result has two columns, the second a
// number. Queries go to POST /console/sql, which the node relays to the SQL server (`lakelog up --sql`)
// after checking that the user may read every lakelog.<topic> the query reads.
import { useState } from 'preact/hooks';
import { ErrorBox, api, fmtNum, html } from './lib.js';

const EXAMPLE = 'SELECT partition, count(*) AS records FROM lakelog.clicks GROUP BY partition ORDER BY partition';
const MAX_BARS = 50;
const cellText = (v) => (v == null ? 'NULL' : typeof v === 'object' ? JSON.stringify(v) : String(v));

// Bars of the second column by the first (the first MAX_BARS rows), drawn as SVG: no library needed.
function BarChart({ columns, rows }) {
  const shown = rows.slice(0, MAX_BARS).map((r) => [cellText(r[0]), Number(r[1])]);
  const top = Math.max(0, ...shown.map(([, y]) => y));
  const w = 640, rowH = 22, labelW = 160, h = shown.length * rowH + 8;
  return html`<figure class="chart" id="sql-chart" data-bars=${shown.length}>
    <figcaption>${columns[1].name} by ${columns[0].name}${rows.length > MAX_BARS ? ` (first ${MAX_BARS} rows)` : ''}</figcaption>
    <svg viewBox=${`0 0 ${w} ${h}`} width=${w} height=${h} style="max-width: 100%" role="img">
      ${shown.map(([label, y], i) => {
        const len = top > 0 ? Math.max(0, (y / top) * (w - labelW - 90)) : 0;
        return html`<g transform=${`translate(0 ${i * rowH + 4})`}>
          <text x=${labelW - 6} y="14" text-anchor="end" font-size="12">${label.slice(0, 24)}</text>
          <rect x=${labelW} y="2" width=${len} height=${rowH - 6} fill="#2563eb"><title>${label}: ${y}</title></rect>
          <text x=${labelW + len + 6} y="14" font-size="12">${fmtNum(y)}</text></g>`;
      })}
    </svg></figure>`;
}

function Results({ result }) {
  const { columns, rows } = result;
  const chartable = columns.length === 2 && rows.length > 0
    && rows.every((r) => r[1] == null || (r[1] !== '' && Number.isFinite(Number(r[1]))));
  return html`<p class="muted" id="sql-summary">${fmtNum(rows.length)} row${rows.length === 1 ? '' : 's'}${result.truncated ? ' (truncated: the first rows only)' : ''} in ${(result.elapsed_ms / 1000).toFixed(1)} s${result.views.length ? ` · read ${result.views.map((v) => 'lakelog.' + v).join(', ')}` : ''}</p>
    ${chartable && html`<${BarChart} columns=${columns} rows=${rows} />`}
    <div class="scroll"><table class="compact" id="sql-results">
      <thead><tr>${columns.map((c) => html`<th title=${c.type}>${c.name}</th>`)}</tr></thead>
      <tbody>${rows.map((r) => html`<tr>${r.map((v) => html`<td class=${v == null ? 'muted' : ''}>${cellText(v)}</td>`)}</tr>`)}</tbody>
    </table></div>`;
}

export function SqlPage() {
  const [query, setQuery] = useState(() => sessionStorage.getItem('lakelog.sql') || EXAMPLE);
  const [state, setState] = useState({ busy: false, result: null, error: null });
  const run = async () => {
    const text = query.trim();
    if (!text) {
      setState({ busy: false, result: null, error: new Error('write a query first') });
      return;
    }
    sessionStorage.setItem('lakelog.sql', query);
    setState((s) => ({ ...s, busy: true, error: null }));
    try {
      setState({ busy: false, result: await api('POST', '/console/sql', { query: text }), error: null });
    } catch (e) {
      // One line: the node's or Spark's first line says what is wrong.
      setState({ busy: false, result: null, error: Object.assign(e, { message: String(e.message).split('\n')[0] }) });
    }
  };
  const onKey = (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); } };
  return html`<h1>SQL</h1>
    <p class="muted">Spark SQL over the topics: <code>${'lakelog.<topic>'}</code> is every record up to the high
      watermark, <code>${'lakelog.<topic>_table'}</code> the Delta table sync-tables keeps. Queries only; Ctrl+Enter runs.</p>
    <form class="action" id="sql-form" onSubmit=${(e) => { e.preventDefault(); run(); }} novalidate>
      <label class="wide">Query <textarea name="query" id="sql-query" rows="6" spellcheck="false"
        value=${query} onInput=${(e) => setQuery(e.target.value)} onKeyDown=${onKey}></textarea></label>
      <button type="submit" id="sql-run" disabled=${state.busy}>${state.busy ? 'Running…' : 'Run'}</button>
    </form>
    <div id="sql-error"><${ErrorBox} error=${state.error} /></div>
    ${state.result && html`<${Results} result=${state.result} />`}`;
}
