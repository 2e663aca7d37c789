// The network view (GET /network, refreshed every 5 s) and a node's status (GET
// /network/nodes/{name}, with the key its operator entered). No prompts, no answers.
/** nodes: absent for a caller without a user or reader key (issue 53): shown as "–". */
interface NetworkModel {
  name: string;
  nodes?: number;
  queued: number;
  jobs_per_minute: number;
}
interface Recent {
  model: string;
  node: string | null;
  finished_at: string;
  seconds: number;
}
interface Verification {
  checked_share: number;
  strikes_24h: {
    disagreement: number;
    replay: number;
    too_fast: number;
    give_up: number;
    failure: number;
    impostor: number;
    false_request_error: number;
    false_score: number;
  };
  nodes_on_probation: number;
  nodes_suspended: number;
}
interface Network {
  active_nodes: number;
  jobs_per_minute: number;
  queued: number;
  models: NetworkModel[];
  recent: Recent[];
  latency: Latency[];
  verification: Verification;
}
/** This server's medians of its done completions (GET /network `latency`, issue 56); node null for a stranger. */
interface Latency {
  model: string;
  node: string | null;
  completions: number;
  time_to_first_token_seconds_p50: number | null;
  request_queue_time_seconds_p50: number | null;
  output_tokens_per_second_p50: number | null;
}
interface NodeJob {
  model: string;
  attempt: number;
  leased_at: string;
  ended_at: string | null;
  outcome: string | null;
  seconds: number | null;
  reversed: string | null;
}
export interface NodeView {
  name: string;
  online: boolean;
  last_seen_at: string | null;
  models: string[];
  open_leases: number;
  jobs: NodeJob[];
  standing: 'trusted' | 'probation' | 'suspended';
  strikes_counting: number;
  points_reversed: number;
}

const $ = (id: string): HTMLElement => document.getElementById(id)!;
const cell = (text: string, className?: string) =>
  Object.assign(document.createElement('td'), { textContent: text, ...(className ? { className } : {}) });
const row = (...cells: HTMLElement[]) => {
  const tr = document.createElement('tr');
  tr.append(...cells);
  return tr;
};
// A cell whose text must not wrap (a duration, a time: "333 / ms" at 375 px, outside probe).
const nowrap = (text: string) => cell(text, 'nowrap');
/** A model's name, with break opportunities after its ':' and '/' so a narrow column breaks "llama3.2:" / "latest", not "llama3.2:la" / "test". */
export function breakable(name: string): (string | HTMLElement)[] {
  return name.split(/(?<=[:/])/).flatMap((part, i) => (i === 0 ? [part] : [document.createElement('wbr'), part]));
}
const modelCell = (name: string) => {
  const td = cell('', 'mono');
  td.append(...breakable(name));
  return td;
};
const span = (text: string, className: string) => Object.assign(document.createElement('span'), { textContent: text, className });
const seconds = (s: number | null) => (s === null ? '—' : s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(1)} s`);

export function ago(iso: string, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ago`;
  return iso.slice(0, 10);
}

function renderNetwork(n: Network): void {
  $('net-active').textContent = String(n.active_nodes);
  $('net-rate').textContent = String(n.jobs_per_minute);
  $('net-queued').textContent = String(n.queued);
  $('net-models')
    .querySelector('tbody')!
    .replaceChildren(
      ...(n.models.length
        ? n.models.map((m) =>
            row(modelCell(m.name), cell(m.nodes === undefined ? '–' : String(m.nodes)), cell(String(m.queued)), cell(String(m.jobs_per_minute))),
          )
        : [row(Object.assign(cell('No node is online yet.'), { colSpan: 4 }))]),
    );
  $('net-recent').replaceChildren(
    ...(n.recent.length
      ? n.recent.map((r) => {
          const li = document.createElement('li');
          li.append(
            ...breakable(r.model),
            ' · ',
            r.node ?? '?',
            ' · ',
            span(seconds(r.seconds), 'nowrap'),
            ' · ',
            span(ago(r.finished_at), 'nowrap'),
          );
          return li;
        })
      : [Object.assign(document.createElement('li'), { textContent: 'No job done yet.' })]),
  );
  const ms = (s: number | null) => (s === null ? '–' : `${(s * 1000).toFixed(s < 0.1 ? 1 : 0)} ms`);
  $('net-latency')
    .querySelector('tbody')!
    .replaceChildren(
      ...(n.latency.length
        ? n.latency.map((l) =>
            row(
              modelCell(l.model),
              cell(l.node ?? 'all'),
              cell(String(l.completions)),
              cell(ms(l.time_to_first_token_seconds_p50)),
              cell(ms(l.request_queue_time_seconds_p50)),
              cell(l.output_tokens_per_second_p50 === null ? '–' : l.output_tokens_per_second_p50.toFixed(0)),
            ),
          )
        : [row(Object.assign(cell('No completion answered by this server yet.'), { colSpan: 6 }))]),
    );
  const v = n.verification;
  $('net-checked').textContent = `${(v.checked_share * 100).toFixed(1)} %`;
  $('net-suspended').textContent = String(v.nodes_suspended);
  const s = v.strikes_24h;
  $('net-strikes').textContent =
    `Strikes in the last 24 h: ${s.disagreement} disagreeing, ${s.replay} replayed, ${s.too_fast} too fast, ${s.give_up} given up, ${s.failure} for failed attempts, ${s.impostor} impostor, ${s.false_request_error} false request errors, ${s.false_score} false scores · nodes on probation: ${v.nodes_on_probation}`;
  $('net-updated').textContent = `Updated ${new Date().toISOString().slice(11, 19)} UTC`;
}

/** `key`: the key entered on the page, if any; a reader key (rk_…) also reads the per-model node counts (issue 53). */
export function startNetworkView(key: () => string | null = () => null): void {
  const refresh = async () => {
    try {
      const k = key();
      const res = await fetch('network', k?.startsWith('rk_') ? { headers: { api_key: k } } : {});
      if (!res.ok) throw new Error(String(res.status));
      renderNetwork((await res.json()) as Network);
      $('net-error').hidden = true;
    } catch {
      $('net-error').textContent = 'The network view could not be loaded; retrying.';
      $('net-error').hidden = false;
    }
  };
  void refresh();
  window.setInterval(() => void refresh(), 5_000);
}

/** The node's status under its points, or hidden when the key may not read it. */
export async function showNodeStatus(node: string, key: string): Promise<NodeView | undefined> {
  const res = await fetch(`network/nodes/${encodeURIComponent(node)}`, { headers: { api_key: key } }).catch(() => undefined);
  if (!res?.ok) {
    $('node-status').hidden = true;
    return undefined;
  }
  const v = (await res.json()) as NodeView;
  const badge = $('node-online');
  badge.textContent = v.online ? 'online' : 'offline';
  badge.className = `badge ${v.online ? 'on' : 'off'}`;
  $('node-seen').textContent = v.last_seen_at ? `last seen ${ago(v.last_seen_at)}` : 'never seen';
  $('node-models').textContent = v.models.length ? v.models.join(', ') : 'none declared';
  $('node-leases').textContent = String(v.open_leases);
  const standing = $('node-standing');
  standing.textContent = v.standing === 'probation' ? 'on probation' : v.standing;
  standing.className = `badge ${v.standing === 'trusted' ? 'on' : 'off'}`;
  $('node-strikes').textContent =
    `${v.strikes_counting} strike${v.strikes_counting === 1 ? '' : 's'} counting` +
    (v.points_reversed > 0 ? ` · ${v.points_reversed} points taken back` : '') +
    (v.standing === 'trusted' ? '' : ' · ask the network operator for the evidence (ins node audit)');
  $('node-jobs')
    .querySelector('tbody')!
    .replaceChildren(
      ...(v.jobs.length
        ? v.jobs.map((j) =>
            row(
              modelCell(j.model),
              j.reversed ? cell(`${j.outcome ?? 'done'}, points taken back (${j.reversed})`, 'bad') : cell(j.outcome ?? 'running'),
              nowrap(seconds(j.seconds)),
              nowrap(ago(j.leased_at)),
            ),
          )
        : [row(Object.assign(cell('No job yet.'), { colSpan: 4 }))]),
    );
  $('node-status').hidden = false;
  return v;
}
