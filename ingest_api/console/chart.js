// A time-series chart (uPlot): x = seconds since the epoch, one line per series.
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import { html } from './lib.js';

const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2'];

// data: [xs, ys1, ys2, ...]; series: the names of ys1, ys2, ...
export function Chart({ title, series, data, unit = '', height = 180 }) {
  const box = useRef(null);
  const plot = useRef(null);
  const key = series.join('|');
  useEffect(() => {
    const opts = {
      width: Math.max(300, box.current.clientWidth), height,
      series: [{}, ...series.map((label, i) => ({ label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true,
                                                    value: (u, v) => (v == null ? '–' : `${+v.toFixed(2)} ${unit}`) }))],
      axes: [{}, { size: 60, values: (u, vals) => vals.map((v) => `${+v.toFixed(2)}`) }],
      scales: { x: { time: true } },
    };
    plot.current = new uPlot(opts, data, box.current);
    const resize = () => plot.current.setSize({ width: Math.max(300, box.current.clientWidth), height });
    window.addEventListener('resize', resize);
    return () => { window.removeEventListener('resize', resize); plot.current.destroy(); plot.current = null; };
  }, [key]);
  useEffect(() => { if (plot.current) plot.current.setData(data); }, [data]);
  const ys = data[1] || [];
  // data-points / data-last: how many samples the chart holds and its first series' newest value.
  return html`<figure class="chart" data-chart=${title} data-points=${ys.length} data-last=${ys.length ? ys[ys.length - 1] : ''}><figcaption>${title}${unit ? ` (${unit})` : ''}</figcaption>
    <div ref=${box}></div></figure>`;
}
