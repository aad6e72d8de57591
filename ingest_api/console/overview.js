// Overview: the nodes, partition health, and produce/fetch rates and latency charted from the
// nodes' own counters (two samples of a total make a rate; latency sums over counts a mean).
import { Chart } from './chart.js';
import { ErrorBox, Link, api, fmtNum, fmtTime, html, usePoll } from './lib.js';

const POLL_MS = 2000;
const KEEP_SAMPLES = 150; // five minutes at one sample every two seconds
const EVENTS_SHOWN = 30;

// Kept across page changes, so going back to the overview does not restart the charts.
const history = { last: null, xs: [], records: [], produceMB: [], fetchMB: [], produceMs: [], fetchMs: [] };

function totals(overview) {
  const t = { records: 0, produceBytes: 0, fetchBytes: 0, pSum: 0, pCount: 0, fSum: 0, fCount: 0, nodes: {} };
  for (const n of overview.nodes) {
    const s = n.stats;
    if (!s) continue;
    t.records += s.produce_records;
    t.produceBytes += s.produce_bytes;
    t.fetchBytes += s.fetch_bytes;
    t.pSum += s.produce_latency.seconds_sum;
    t.pCount += s.produce_latency.count;
    t.fSum += s.fetch_latency.seconds_sum;
    t.fCount += s.fetch_latency.count;
    t.nodes[n.node_id] = true;
  }
  return t;
}

function record(overview) {
  const now = Date.now() / 1000;
  const t = totals(overview);
  const prev = history.last;
  history.last = { at: now, t };
  // A rate needs the same nodes in both samples (a node restarting resets its counters).
  if (!prev || Object.keys(prev.t.nodes).join() !== Object.keys(t.nodes).join()) return;
  const dt = now - prev.at;
  const rate = (a, b) => Math.max(0, (a - b) / dt);
  const mean = (sum, psum, count, pcount) => (count > pcount ? ((sum - psum) / (count - pcount)) * 1000 : null);
  history.xs.push(now);
  history.records.push(rate(t.records, prev.t.records));
  history.produceMB.push(rate(t.produceBytes, prev.t.produceBytes) / 1e6);
  history.fetchMB.push(rate(t.fetchBytes, prev.t.fetchBytes) / 1e6);
  history.produceMs.push(mean(t.pSum, prev.t.pSum, t.pCount, prev.t.pCount));
  history.fetchMs.push(mean(t.fSum, prev.t.fSum, t.fCount, prev.t.fCount));
  for (const k of Object.keys(history)) {
    if (Array.isArray(history[k]) && history[k].length > KEEP_SAMPLES) history[k].shift();
  }
}

function nodeStatus(n) {
  if (!n.reachable) return ['down', 'down'];
  if (n.fenced) return ['fenced', 'warn'];
  if (n.in_controlled_shutdown) return ['shutting down', 'warn'];
  if (n.stats && n.stats.log_dir === 'offline') return ['log directory offline', 'down'];
  if (n.stats && n.stats.remote_tier && n.stats.remote_tier !== 'healthy') return [`up, remote tier ${n.stats.remote_tier}`, 'warn'];
  return ['up', 'ok'];
}

// A node's Kafka listeners as `bootstrap.servers` entries, the listener's name beside any but PLAINTEXT.
function kafkaListeners(n) {
  if (!n.kafka_listeners || !n.kafka_listeners.length) return '–';
  return n.kafka_listeners.map((l) => `${l.host}:${l.port}${l.name === 'PLAINTEXT' ? '' : ` (${l.name})`}`).join(', ');
}

export function Overview() {
  const [data, error] = usePoll(async () => {
    const [o, ev] = await Promise.all([api('GET', '/stats/cluster'), api('GET', `/stats/events?limit=${EVENTS_SHOWN}`)]);
    record(o);
    o.events = ev;
    return o;
  }, POLL_MS);
  if (!data) return html`<h1>Overview</h1><${ErrorBox} error=${error} />${!error && html`<p class="muted">Loading…</p>`}`;
  const p = data.partitions;
  const up = data.nodes.filter((n) => nodeStatus(n)[0].startsWith('up')).length;
  const h = history;
  return html`<h1>Overview</h1>
    <${ErrorBox} error=${error} />
    <section class="cards">
      <div class="card"><b id="nodes-up">${up} / ${data.nodes.length}</b><span>nodes up</span></div>
      <div class="card"><b>${fmtNum(data.topics)}</b><span>topics</span></div>
      <div class="card"><b>${fmtNum(p.total)}</b><span>partitions</span></div>
      <div class=${'card ' + (p.offline ? 'bad' : '')}><b id="offline">${fmtNum(p.offline)}</b><span>offline</span></div>
      <div class=${'card ' + (p.under_replicated ? 'warn' : '')}><b id="under-replicated">${fmtNum(p.under_replicated)}</b><span>under-replicated</span></div>
      <div class=${'card ' + (p.at_min_isr ? 'warn' : '')}><b id="at-min-isr">${fmtNum(p.at_min_isr)}</b><span>at min ISR</span></div>
    </section>
    <h2>Nodes</h2>
    <table id="nodes"><thead><tr><th>Node</th><th>Status</th><th>Address</th><th>Kafka listener</th>
      <th>Kafka connections</th><th>Rack</th><th>Role</th></tr></thead>
    <tbody>${data.nodes.map((n) => {
      const [status, cls] = nodeStatus(n);
      return html`<tr data-node=${n.node_id}><td>${n.node_id}</td><td><span class=${'badge ' + cls}>${status}</span></td>
        <td>${n.host}:${n.port}</td><td class="kafka-listener">${kafkaListeners(n)}</td>
        <td class="kafka-connections">${fmtNum(n.stats?.kafka_connections)}</td><td>${n.rack ?? '–'}</td>
        <td>${n.controller ? 'active controller' : ''}${n.node_id === data.served_by ? ' (serving this page)' : ''}</td></tr>`;
    })}</tbody></table>
    <section class="charts">
      <${Chart} title="Produce" unit="records/s" series=${['records/s']} data=${[h.xs, h.records]} />
      <${Chart} title="Throughput" unit="MB/s" series=${['produced', 'fetched']} data=${[h.xs, h.produceMB, h.fetchMB]} />
      <${Chart} title="Request latency" unit="ms" series=${['produce', 'fetch']} data=${[h.xs, h.produceMs, h.fetchMs]} />
    </section>
    <h2>Recent cluster events</h2>
    <${Events} doc=${data.events} />
    ${p.listed.length > 0 && html`<h2>Partitions needing attention</h2>
      <table id="unhealthy"><thead><tr><th>Partition</th><th>Leader</th><th>Replicas</th><th>ISR</th><th>Problem</th></tr></thead>
      <tbody>${p.listed.map((x) => html`<tr><td><${Link} to=${`/topics/${encodeURIComponent(x.topic)}`}>${x.topic}</${Link}>-${x.partition}</td>
        <td>${x.leader < 0 ? 'none' : x.leader}</td><td>${x.replicas.join(', ')}</td><td>${x.isr.join(', ')}</td>
        <td>${x.problems.join(', ')}</td></tr>`)}</tbody></table>`}`;
}

function Events({ doc }) {
  if (!doc.events.length) {
    return html`<p class="muted" id="no-events">No cluster events since node ${doc.served_by} caught up${doc.since_ms ? ` (${fmtTime(doc.since_ms)})` : ''}.</p>`;
  }
  return html`<table id="events" class="compact"><thead><tr><th>Time (UTC)</th><th>Event</th><th></th></tr></thead>
    <tbody>${doc.events.map((e) => html`<tr data-kind=${e.kind} data-seq=${e.seq}>
      <td>${fmtTime(e.time_ms)}</td><td>${e.topic ? html`<${Link} to=${`/topics/${encodeURIComponent(e.topic)}`}>${e.message}<//>` : e.message}</td>
      <td><span class=${'badge ' + (e.severity === 'warn' ? 'warn' : 'ok')}>${e.kind.replaceAll('_', ' ')}</span></td></tr>`)}</tbody></table>
    <p class="muted">As node ${doc.served_by} applied the cluster metadata, since ${fmtTime(doc.since_ms)}; the newest ${EVENTS_SHOWN}.</p>`;
}
