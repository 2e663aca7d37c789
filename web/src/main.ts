// The dashboard: the network view (web/src/network.ts) and two forms over the service's own
// endpoints (POST /daily_points with the node's status and its verified days, web/src/ledger.ts;
// GET /unique_nodes). The key lives in
// the form, and in sessionStorage only if asked.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import './style.css';
import { showNodeStatus, startNetworkView } from './network.js';
import { showVerifiedDays } from './ledger.js';
import { startUsageForm } from './usage.js';

interface DayPoints {
  date: string;
  points: number;
}
interface UniqueNodes {
  model_name: string;
  start_date: string | null;
  end_date: string | null;
  count: number;
  nodes: string[];
}

const KEY_STORE = 'ins.dashboard.key';
const NAME_STORE = 'ins.dashboard.node';
const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;

class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly detail: unknown,
    readonly retryAfter: string | null,
  ) {
    super(typeof detail === 'string' ? detail : 'request failed');
  }
}

async function call<T>(path: string, init: RequestInit): Promise<T> {
  let res: Response;
  try {
    res = await fetch(path, init);
  } catch {
    throw new ApiError(0, 'network', null);
  }
  const body: unknown = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, (body as { detail?: unknown } | null)?.detail, res.headers.get('retry-after'));
  return body as T;
}

// The service's errors, said in words a node operator can act on.
function explain(err: unknown, context: { node?: string }): string {
  if (!(err instanceof ApiError)) return 'Something went wrong; please try again.';
  const detail = typeof err.detail === 'string' ? err.detail : '';
  switch (err.status) {
    case 0:
      return 'The service could not be reached. Check your connection and try again.';
    case 401:
      return detail === 'Not authenticated'
        ? 'Enter the node key (nk_…) or a reader key (rk_…).'
        : 'This key is not valid. Check it for typos, or ask the network operator for a new one.';
    case 403:
      if (detail === 'Node is disabled') return 'This node is disabled. Ask the network operator to enable it.';
      // A user key (an application's) reads no node's points: the server says so in these words (routes/authenticate.ts).
      if (detail === "This key cannot read nodes' data")
        return "This key is an application's (uk_…): it reads no node's points. Enter the node key (nk_…) or a reader key (rk_…).";
      return `This key belongs to another node, so it cannot show the points of “${context.node ?? ''}”.`;
    case 404:
      return `No node is named “${context.node ?? ''}”. Node names are case-sensitive.`;
    case 422: {
      const first = Array.isArray(err.detail) ? (err.detail[0] as { loc?: unknown[]; msg?: string }) : undefined;
      return first
        ? `Please check ${String((first.loc?.at(-1) as string | number | undefined) ?? 'the form').replace('_', ' ')}: ${first.msg ?? 'invalid value'}.`
        : 'Please check the form.';
    }
    case 429:
      return `Too many requests. Try again in ${err.retryAfter ?? 'a few'} seconds.`;
    case 503:
      return 'The service is temporarily unavailable. Try again in a moment.';
    default:
      return 'The service had a problem. Try again later.';
  }
}

function showError(id: string, message: string | null): void {
  const el = $(id);
  el.textContent = message ?? '';
  el.hidden = message === null;
}

const fmt = new Intl.NumberFormat('en', { maximumFractionDigits: 2 });
const dayLabel = new Intl.DateTimeFormat('en', { month: 'short', day: 'numeric', timeZone: 'UTC' });
const DAY = 86_400;
const DAY_TICKS = [DAY, 2 * DAY, 7 * DAY, 14 * DAY, 28 * DAY, 56 * DAY, 91 * DAY, 182 * DAY, 364 * DAY];
let chart: uPlot | undefined;

function drawChart(days: DayPoints[]): void {
  const host = $('chart');
  const xs = days.map((d) => Date.parse(`${d.date}T00:00:00Z`) / 1000);
  const ys = days.map((d) => d.points);
  const width = Math.max(280, host.clientWidth);
  chart?.destroy();
  chart = new uPlot(
    {
      width,
      height: 240,
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      // Half a day of room on each side, so the first and last bars are not cut in half.
      scales: {
        x: { time: true, range: (_u, min, max) => [min - 43_200, max + 43_200] },
        y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] },
      },
      // Ticks on whole days, as dates: uPlot's own time ticks put "12pm" between the days of a per-day chart (outside probe, 1280 px).
      axes: [
        { incrs: DAY_TICKS, values: (_u, vals) => vals.map((v) => dayLabel.format(new Date(v * 1000))) },
        { size: 50, values: (_u, vals) => vals.map((v) => fmt.format(v)) },
      ],
      series: [
        {},
        {
          label: 'Points',
          fill: 'rgba(37, 99, 235, 0.75)',
          stroke: '#1d4ed8',
          paths: uPlot.paths.bars!({ size: [0.7, 40] }),
          points: { show: false },
        },
      ],
    },
    [xs, ys],
    host,
  );
  // A debugging hook: the chart as drawn (its data is what the tests compare with the API).
  (window as unknown as { insDashboard: { chart: uPlot } }).insDashboard = { chart };
}

function renderPoints(node: string, days: DayPoints[]): void {
  const total = days.reduce((s, d) => s + d.points, 0);
  const best = days.reduce<DayPoints | undefined>((b, d) => (d.points > (b?.points ?? 0) ? d : b), undefined);
  $('stat-total').textContent = fmt.format(total);
  const bestEl = $('stat-best');
  if (best) {
    bestEl.replaceChildren(
      fmt.format(best.points),
      Object.assign(document.createElement('span'), { className: 'sub', textContent: `on ${best.date}` }),
    );
  } else {
    bestEl.textContent = 'no points yet';
  }
  $('stat-active').textContent = `${days.filter((d) => d.points > 0).length} of ${days.length}`;
  $('chart-caption').textContent = `Points per UTC day for ${node}, ${days[0]?.date} to ${days.at(-1)?.date}.`;
  const body = $('points-table').querySelector('tbody')!;
  body.replaceChildren(
    ...days.map((d) => {
      const tr = document.createElement('tr');
      tr.dataset.date = d.date;
      tr.dataset.points = String(d.points);
      tr.append(
        Object.assign(document.createElement('td'), { textContent: d.date, className: 'nowrap' }),
        Object.assign(document.createElement('td'), { textContent: fmt.format(d.points) }),
      );
      return tr;
    }),
  );
  $('node-result').hidden = false;
  drawChart(days);
}

async function onNodeSubmit(e: Event): Promise<void> {
  e.preventDefault();
  const node = $<HTMLInputElement>('node-name').value.trim();
  const key = $<HTMLInputElement>('node-key').value.trim();
  const lastDays = Number($<HTMLSelectElement>('node-days').value);
  showError('node-error', null);
  if (!node) return showError('node-error', 'Enter the name of your node.');
  if (!key) return showError('node-error', 'Enter the node key (nk_…) or a reader key (rk_…).');
  if ($<HTMLInputElement>('node-remember').checked) {
    sessionStorage.setItem(KEY_STORE, key);
    sessionStorage.setItem(NAME_STORE, node);
  } else {
    sessionStorage.removeItem(KEY_STORE);
  }
  try {
    const days = await call<DayPoints[]>('daily_points', {
      method: 'POST',
      headers: { 'content-type': 'application/json', api_key: key },
      body: JSON.stringify({ node_name: node, last_days: lastDays }),
    });
    renderPoints(node, days);
    await showNodeStatus(node, key);
    await showVerifiedDays(node, key, lastDays, new Map(days.map((d) => [d.date, d.points])));
  } catch (err) {
    $('node-result').hidden = true;
    showError('node-error', explain(err, { node }));
  }
}

// A date input gives midnight of its day; "To" is inclusive, so it means the end of that day.
function windowParams(): URLSearchParams {
  const params = new URLSearchParams({ model_name: $<HTMLInputElement>('model-name').value.trim() });
  const start = $<HTMLInputElement>('model-start').value;
  const end = $<HTMLInputElement>('model-end').value;
  if (start) params.set('start_date', `${start}T00:00:00Z`);
  if (end) params.set('end_date', `${end}T23:59:59.999999Z`);
  return params;
}

async function onModelSubmit(e: Event): Promise<void> {
  e.preventDefault();
  showError('model-error', null);
  const params = windowParams();
  if (!params.get('model_name')) return showError('model-error', 'Enter a model name, e.g. llama3.2:latest.');
  try {
    const r = await call<UniqueNodes>(`unique_nodes?${params}`, { method: 'GET' });
    const span =
      r.start_date || r.end_date ? ` between ${r.start_date?.slice(0, 10) ?? 'the beginning'} and ${r.end_date?.slice(0, 10) ?? 'now'}` : '';
    $('model-summary').textContent =
      r.count === 0
        ? `No node reported a successful job for ${r.model_name}${span}.`
        : `${r.count} node${r.count === 1 ? '' : 's'} served ${r.model_name}${span}:`;
    $('model-nodes').replaceChildren(...r.nodes.map((n) => Object.assign(document.createElement('li'), { textContent: n })));
    $('model-result').hidden = false;
  } catch (err) {
    $('model-result').hidden = true;
    showError('model-error', explain(err, {}));
  }
}

function restore(): void {
  const key = sessionStorage.getItem(KEY_STORE);
  if (key) {
    $<HTMLInputElement>('node-key').value = key;
    $<HTMLInputElement>('node-name').value = sessionStorage.getItem(NAME_STORE) ?? '';
    $<HTMLInputElement>('node-remember').checked = true;
  }
}

$('node-form').addEventListener('submit', (e) => void onNodeSubmit(e));
$('model-form').addEventListener('submit', (e) => void onModelSubmit(e));
let resizeTimer: number | undefined;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = window.setTimeout(() => chart?.setSize({ width: Math.max(280, $('chart').clientWidth), height: 240 }), 100);
});
restore();
startNetworkView(() => sessionStorage.getItem(KEY_STORE));
startUsageForm();
