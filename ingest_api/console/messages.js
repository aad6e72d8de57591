// The message browser: one partition from an offset or a timestamp, paged forward and back, a live
// tail (long-poll fetches), keys and values as JSON, text or hex, headers, and produce a test record.
import { useEffect, useState } from 'preact/hooks';
import { ActionForm, ErrorBox, Link, api, enc, fmtBytes, fmtNum, fmtTime, html, parseIntField, session, usePoll } from './lib.js';

const BINARY = 'application/vnd.kafka.binary.v2+json';
const PREVIEW_CHARS = 512;      // a longer key or value shows truncated until expanded
const FETCH_BYTES = 1 << 20;    // at most this much per fetch
const DOWNLOAD_FETCH_BYTES = 256 << 10;  // per fetch of a range download (a page at a time)
const TAIL_KEEP = 200;          // records the live tail keeps on screen
const MAX_PRODUCE_BYTES = 1 << 20;
const DECODE_BATCH = 200;       // keys and values per /stats/decode request (the node takes 400)

const decodeB64 = (s) => (s == null ? null : Uint8Array.from(atob(s), (c) => c.charCodeAt(0)));
const utf8 = new TextDecoder('utf-8', { fatal: true });

// bytes -> [shown text, the format used]; 'auto' picks JSON, then text, then hex.
export function render(bytes, format) {
  if (bytes == null) return ['null', 'null'];
  const hex = () => [Array.from(bytes.subarray(0, 4096), (b) => b.toString(16).padStart(2, '0')).join(' ')
                     + (bytes.length > 4096 ? ' …' : ''), 'hex'];
  if (format === 'hex') return hex();
  let text;
  try { text = utf8.decode(bytes); } catch { return hex(); }
  if (format === 'json' || format === 'auto') {
    try { return [JSON.stringify(JSON.parse(text), null, format === 'json' ? 2 : 0), 'json']; } catch { /* not JSON */ }
    if (format === 'json') return [text, 'text'];
  }
  return [text, 'text'];
}

// Keys and values in Confluent's wire format (magic byte 0, schema id), decoded by the node's Schema
// Registry in one request per page; each record gets keySchema / valueSchema ({schema_id, value} or {error}).
const framed = (s) => { const b = decodeB64(s); return b != null && b.length >= 5 && b[0] === 0; };

async function decodeBySchema(records) {
  const items = [];
  for (const r of records) {
    if (framed(r.key)) items.push([r, 'keySchema', r.key]);
    if (framed(r.value)) items.push([r, 'valueSchema', r.value]);
  }
  for (let i = 0; i < items.length; i += DECODE_BATCH) {
    const batch = items.slice(i, i + DECODE_BATCH);
    const { results } = await api('POST', '/stats/decode', { data: batch.map((x) => x[2]) });
    batch.forEach(([r, field], j) => { if (results[j]) r[field] = results[j]; });
  }
  return records;
}

function schemaLabel(d) {
  const where = d.subjects && d.subjects.length ? ` · ${d.subjects.map((s) => `${s.subject} v${s.version}`).join(', ')}` : '';
  return `schema ${d.schema_id}${d.schema_type ? ` (${d.schema_type})` : ''}${where}${d.message ? ` · ${d.message}` : ''}`;
}

function Value({ bytes, format, decoded }) {
  const [open, setOpen] = useState(false);
  let [text, kind] = render(bytes, format);
  const bySchema = decoded && (format === 'auto' || format === 'schema');
  if (bySchema) [text, kind] = decoded.error ? render(bytes, 'hex')  // framed bytes that did not decode: show them as they are
    : [JSON.stringify(decoded.value, null, format === 'schema' ? 2 : 0), 'json'];
  const long = text.length > PREVIEW_CHARS;
  return html`<span class=${'value ' + kind}>${bySchema && html`<span class=${'schema' + (decoded.error ? ' bad' : '')}>${schemaLabel(decoded)}${decoded.error ? `: ${decoded.error}` : ''}</span>`}${long && !open ? text.slice(0, PREVIEW_CHARS) + '…' : text}
    ${long && html` <button class="link" onClick=${() => setOpen(!open)}>${open ? 'less' : `all ${fmtBytes(bytes.length)}`}</button>`}</span>`;
}

function Records({ records, format }) {
  if (!records.length) return html`<p class="muted" id="no-records">No records here.</p>`;
  return html`<table id="records" class="records"><thead><tr><th>Offset</th><th>Timestamp</th><th>Key</th><th>Value</th><th>Headers</th></tr></thead>
    <tbody>${records.map((r) => html`<tr key=${r.offset} data-offset=${r.offset}>
      <td>${r.offset}</td><td>${fmtTime(r.timestamp)}</td>
      <td><${Value} bytes=${decodeB64(r.key)} format=${format} decoded=${r.keySchema} /></td>
      <td><${Value} bytes=${decodeB64(r.value)} format=${format} decoded=${r.valueSchema} /></td>
      <td>${(r.headers || []).map((hd) => html`<div><b>${hd.key}</b>: <${Value} bytes=${decodeB64(hd.value)} format="auto" /></div>`)}</td>
    </tr>`)}</tbody></table>`;
}

const fetchRecords = (name, partition, offset, timeout, signal, maxBytes = FETCH_BYTES) => api('GET',
  `/topics/${enc(name)}/partitions/${partition}/records?offset=${offset}&timeout=${timeout}&max_bytes=${maxBytes}`,
  undefined, { accept: BINARY, signal, raw: true });

function LiveTail({ name, partition, format }) {
  const [records, setRecords] = useState([]);
  const [error, setError] = useState(null);
  useEffect(() => {
    const abort = new AbortController();
    (async () => {
      let next = null;
      while (!abort.signal.aborted) {
        try {
          if (next == null) next = (await api('GET', `/topics/${enc(name)}/partitions/${partition}/offsets`)).end_offset;
          const { body } = await fetchRecords(name, partition, next, 1000, abort.signal);
          if (body.length) {
            next = body[body.length - 1].offset + 1;
            await decodeBySchema(body);
            setRecords((old) => body.slice().reverse().concat(old).slice(0, TAIL_KEEP));
          }
          setError(null);
        } catch (e) {
          if (e.name === 'AbortError') return;
          setError(e); // a leader moving, a node restarting: say so, and try again in a second
          await new Promise((done) => setTimeout(done, 1000));
        }
      }
    })();
    return () => abort.abort();
  }, [name, partition]);
  return html`<div id="tail"><p class="muted">Waiting for new records on partition ${partition}… (newest first)</p>
    <${ErrorBox} error=${error} /><${Records} records=${records} format=${format} /></div>`;
}

function Produce({ name, partitions }) {
  const submit = async (form) => {
    const p = String(form.get('partition'));
    const key = String(form.get('key'));
    const value = String(form.get('value'));
    const headers = [];
    for (const line of String(form.get('headers')).split('\n').map((l) => l.trim()).filter(Boolean)) {
      const i = line.indexOf('=');
      if (i < 1) throw new Error(`a header is name=value, not "${line}"`);
      headers.push({ key: line.slice(0, i), value: b64(line.slice(i + 1)) });
    }
    if (new TextEncoder().encode(key + value).length > MAX_PRODUCE_BYTES) throw new Error('the record is larger than 1 MiB');
    const record = { key: key === '' ? null : b64(key), value: b64(value), headers };
    const path = p === 'any' ? `/topics/${enc(name)}` : `/topics/${enc(name)}/partitions/${p}`;
    const res = await api('POST', path, { records: [record] }, { contentType: BINARY });
    const o = res.offsets[0];
    if (o.error) throw new Error(o.error);
    return `produced at partition ${o.partition}, offset ${o.offset}`;
  };
  return html`<details class="panel"><summary>Produce a test record</summary>
    <${ActionForm} onSubmit=${submit} submit="Produce" id="produce">
      <label>Partition <select name="partition"><option value="any">by key</option>
        ${Array.from({ length: partitions }, (_, i) => html`<option>${i}</option>`)}</select></label>
      <label>Key <input name="key" placeholder="none" /></label>
      <label class="wide">Value <textarea name="value" rows="3"></textarea></label>
      <label class="wide">Headers <textarea name="headers" rows="2" placeholder="name=value, one a line"></textarea></label>
    <//></details>`;
}

// A range of offsets [from, to] fetched page after page (FETCH_BYTES each), at most the node's
// console.download.max.records records and console.download.max.bytes bytes, then saved as one file.
function DownloadRange({ name, partition, view }) {
  const [progress, setProgress] = useState(null);
  const submit = async (form) => {
    const from = parseIntField(form.get('from'), { min: view.start, max: Math.max(view.start, view.end - 1), name: 'from offset' });
    const to = parseIntField(form.get('to'), { min: from, max: Math.max(from, view.end - 1), name: 'to offset' });
    const maxRecords = session.downloadMaxRecords, maxBytes = session.downloadMaxBytes;
    if (to - from + 1 > maxRecords) throw new Error(`at most ${fmtNum(maxRecords)} records in one download (console.download.max.records)`);
    const records = [];
    let next = from, bytes = 0;
    while (next <= to) {
      const { body } = await fetchRecords(name, partition, next, 0, undefined, DOWNLOAD_FETCH_BYTES);
      const page = body.filter((r) => r.offset >= next && r.offset <= to);
      if (!page.length) break; // the end of what the partition holds (or a gap: compacted away)
      for (const r of page) {
        bytes += (r.key ? r.key.length * 0.75 : 0) + (r.value ? r.value.length * 0.75 : 0);
        if (bytes > maxBytes) throw new Error(`the range holds more than ${fmtBytes(maxBytes)} (console.download.max.bytes); download a shorter one`);
        records.push(r);
      }
      next = page[page.length - 1].offset + 1;
      setProgress(`${fmtNum(records.length)} records fetched…`);
    }
    setProgress(null);
    if (!records.length) throw new Error('no records in that range');
    await decodeBySchema(records);
    download(name, partition, records);
    return html`<span id="downloaded">downloaded ${fmtNum(records.length)} records, offsets ${records[0].offset}–${records[records.length - 1].offset}</span>`;
  };
  return html`<details class="panel"><summary>Download a range</summary>
    <${ActionForm} onSubmit=${submit} submit="Download" id="download-range">
      <label>From offset <input name="from" defaultValue=${view.start} inputmode="numeric" /></label>
      <label>To offset (included) <input name="to" defaultValue=${Math.max(view.start, view.end - 1)} inputmode="numeric" /></label>
      ${progress && html`<span class="muted">${progress}</span>`}
    <//>
    <p class="muted">Fetched page by page; at most ${fmtNum(session.downloadMaxRecords)} records and ${fmtBytes(session.downloadMaxBytes)} in one file.</p></details>`;
}

// Records as JSON lines: key and value as text when they are UTF-8, else base64.
function download(name, partition, records) {
  const field = (s) => {
    const bytes = decodeB64(s);
    if (bytes == null) return { text: null };
    try { return { text: utf8.decode(bytes) }; } catch { return { base64: s }; }
  };
  const lines = records.map((r) => {
    const k = field(r.key), v = field(r.value);
    return JSON.stringify({ topic: name, partition, offset: r.offset, timestamp: r.timestamp,
      key: k.text ?? null, ...(k.base64 && { key_base64: k.base64 }),
      value: v.text ?? null, ...(v.base64 && { value_base64: v.base64 }),
      ...(r.keySchema && !r.keySchema.error && { key_schema_id: r.keySchema.schema_id, key_decoded: r.keySchema.value }),
      ...(r.valueSchema && !r.valueSchema.error && { value_schema_id: r.valueSchema.schema_id, value_decoded: r.valueSchema.value }),
      headers: (r.headers || []).map((hd) => ({ key: hd.key, value_base64: hd.value })) });
  });
  const url = URL.createObjectURL(new Blob([lines.join('\n') + '\n'], { type: 'application/x-ndjson' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = `${name}-${partition}-${records[0].offset}-${records[records.length - 1].offset}.jsonl`;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

const b64 = (text) => btoa(String.fromCharCode(...new TextEncoder().encode(text)));

export function MessageBrowser({ name }) {
  // Only the partition count is needed here: one partition's row, not the whole topic.
  const [topic, terror] = usePoll(() => api('GET', `/stats/topics/${enc(name)}?limit=1`), 0, [name]);
  const [partition, setPartition] = useState(0);
  const [format, setFormat] = useState('auto');
  const [pageSize, setPageSize] = useState(20);
  const [tail, setTail] = useState(false);
  const [view, setView] = useState(null);   // {offset, records, start, end}
  const [error, setError] = useState(null);

  const load = async (offset) => {
    setError(null);
    try {
      const bounds = await api('GET', `/topics/${enc(name)}/partitions/${partition}/offsets`);
      const start = Math.max(bounds.beginning_offset, Math.min(offset, bounds.end_offset));
      const records = start < bounds.end_offset ? (await fetchRecords(name, partition, start, 0)).body : [];
      setView({ offset: start, records: await decodeBySchema(records.filter((r) => r.offset >= start).slice(0, pageSize)),
                start: bounds.beginning_offset, end: bounds.end_offset });
    } catch (e) {
      setError(e);
    }
  };
  const go = async (form) => {
    const mode = String(form.get('mode'));
    const at = String(form.get('at')).trim();
    if (mode === 'offset') return load(parseIntField(at, { min: 0, name: 'offset' }));
    if (mode === 'beginning') return load(0);
    if (mode === 'latest') {
      const b = await api('GET', `/topics/${enc(name)}/partitions/${partition}/offsets`);
      return load(Math.max(b.beginning_offset, b.end_offset - pageSize));
    }
    const ms = Date.parse(at.replace(' ', 'T') + (/[zZ]|[+-]\d\d:?\d\d$/.test(at) ? '' : 'Z'));
    if (!at || Number.isNaN(ms)) throw new Error('a timestamp is like 2026-01-31 12:00:00 (UTC)');
    const found = await api('GET', `/topics/${enc(name)}/partitions/${partition}/offsets?timestamp=${ms}`);
    if (found.offset == null) throw new Error('no record at or after that time');
    return load(found.offset);
  };
  useEffect(() => { setView(null); if (!tail) load(0); }, [name, partition, pageSize]);

  if (terror) return html`<h1>Messages of ${name}</h1><${ErrorBox} error=${terror} />`;
  if (!topic) return html`<h1>Messages of ${name}</h1><p class="muted">Loading…</p>`;
  const last = view && view.records.length ? view.records[view.records.length - 1].offset : null;
  return html`<h1>Messages of <${Link} to=${`/topics/${enc(name)}`}>${name}<//></h1>
    <div class="toolbar">
      <label>Partition <select id="partition" value=${partition} onChange=${(e) => setPartition(Number(e.target.value))}>
        ${Array.from({ length: topic.partitions_count }, (_, p) => html`<option value=${p}>${p}</option>`)}</select></label>
      <label>Show <select id="format" value=${format} onChange=${(e) => setFormat(e.target.value)}>
        <option value="auto">auto</option><option value="schema">by schema</option><option value="json">JSON</option><option value="text">text</option><option value="hex">hex</option></select></label>
      <label>Per page <select value=${pageSize} onChange=${(e) => setPageSize(Number(e.target.value))}>
        ${[20, 50, 100].map((n) => html`<option>${n}</option>`)}</select></label>
      <label class="check"><input type="checkbox" id="live" checked=${tail} onChange=${(e) => setTail(e.target.checked)} /> Live tail</label>
    </div>
    ${tail ? html`<${LiveTail} name=${name} partition=${partition} format=${format} />` : html`
      <${ActionForm} onSubmit=${go} submit="Go" id="seek" class="inline">
        <label>From <select name="mode"><option value="offset">offset</option><option value="timestamp">timestamp (UTC)</option>
          <option value="beginning">the beginning</option><option value="latest">the latest</option></select></label>
        <input name="at" placeholder="offset or 2026-01-31 12:00:00" />
      <//>
      <${ErrorBox} error=${error} />
      ${view && html`<div class="pager">
          <button id="prev" disabled=${view.offset <= view.start} onClick=${() => load(Math.max(view.start, view.offset - pageSize))}>◀ Previous</button>
          <span id="range">offsets ${fmtNum(view.start)}–${fmtNum(view.end - 1)} on the partition; showing from ${fmtNum(view.offset)}</span>
          <button id="next" disabled=${last == null || last + 1 >= view.end} onClick=${() => load(last + 1)}>Next ▶</button>
          <button id="download" disabled=${!view.records.length} onClick=${() => download(name, partition, view.records)}>Download these records</button>
        </div>
        <${Records} records=${view.records} format=${format} />
        <${DownloadRange} name=${name} partition=${partition} view=${view} />`}`}
    <${Produce} name=${name} partitions=${topic.partitions_count} />`;
}
