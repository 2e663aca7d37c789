// Where a server's CPU went, from V8 CPU profiles (`node --cpu-prof`; the bench's servers write
// them with `--profile DIR`, bench/run.ts): self time summed by area (a package, a file of
// ours, Node's internals by module, the garbage collector), the top functions by self time,
// and inclusive time under each area (a sample counts once for every area on its stack), each
// in ms per job when the jobs are given. Idle samples ("(idle)") are left out of every total.
//
//   npx tsx bench/profile-table.ts [--jobs N] [--top 30] FILE.cpuprofile [FILE ...]
//
// Several files are summed (e.g. the two runs of one code in an alternating comparison). The
// server's start-up (loading modules, migrating) is left out: samples count from the first one
// inside Node's HTTP parser. `--under REGEX` (repeatable) adds the inclusive time of samples with
// a frame matching REGEX ("function area:line") on their stack, e.g. a hook of ours. First, a
// table by category (logging, metrics, validation, the pg driver…: CATEGORIES below).
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** The area a frame belongs to: an npm package, a file of ours under dist/ or src/, a Node module, or V8's own entries. */
export function areaOf(f: CallFrame): string {
  const url = f.url;
  if (!url) return f.functionName.startsWith('(') ? f.functionName : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (pkg) return pkg[1]!;
  const ours = /\/(?:dist|src)\/(.+?)\.[jt]s$/.exec(url);
  if (ours) return `src/${ours[1]}`;
  const internal = /^node:(?:internal\/)?([^/]+(?:\/[^/]+)?)/.exec(url);
  if (internal) return `node:${internal[1]}`;
  return url;
}

/**
 * What a sample's time was for: the category of the nearest frame on its stack that is not
 * Node's own or native (a log line's JSON.stringify and its write are logging's; a hook that
 * passes control on is charged only its own frames, not the work after it), except that a
 * socket write is the kernel's wherever it comes from. Only Node's frames: Node's own work.
 */
const CATEGORIES: [string, (area: string) => boolean][] = [
  ['logging (pino, its redaction, its writes)', (a) => a === 'pino' || a === 'sonic-boom' || a.includes('redact')],
  ['metrics (prom-client)', (a) => a === 'prom-client' || a === 'src/http/metrics'],
  ['CORS', (a) => a === '@fastify/cors' || a === 'src/http/cors'],
  ['outage retry (p-retry)', (a) => a === 'p-retry' || a === 'retry' || a === 'src/db/outage'],
  ['serialisation (fast-json-stringify)', (a) => a.includes('fast-json-stringify')],
  ['validation (pydantic-compatible, ajv)', (a) => a.startsWith('src/validation') || a === 'src/http/validator' || a === 'ajv'],
  ['body parsing', (a) => a === 'src/http/content'],
  ['authentication (key hashes, caches)', (a) => a === 'src/keys' || a === 'src/routes/authenticate' || a.startsWith('src/auth')],
  ['pg driver (pg, pg-protocol, pg-pool) and src/db', (a) => a === 'pg' || a === 'pg-protocol' || a === 'pg-pool' || a.startsWith('src/db')],
  ["the job's own logic (src/jobs, src/usage, routes…)", (a) => a.startsWith('src/')],
  [
    'Fastify (routing, hooks, reply)',
    (a) => a === 'fastify' || a === 'find-my-way' || a.startsWith('@fastify/') || a === 'avvio' || a.startsWith('fast-') || a === 'toad-cache',
  ],
  ['garbage collector', (a) => a === '(garbage collector)'],
];
const SOCKET_WRITES = new Set(['writev', 'writeBuffer', 'writeUtf8String', 'writeLatin1String', 'writeAsciiString']);
const NODE = 'Node: HTTP parsing, streams, sockets, timers';

export interface ProfileSums {
  totalMs: number;
  idleMs: number;
  selfByArea: Map<string, number>;
  selfByFunction: Map<string, number>;
  inclusiveByArea: Map<string, number>;
  under: Map<string, number>;
  byCategory: Map<string, number>;
}

const frameName = (f: CallFrame): string => `${f.functionName || '(anonymous)'} ${areaOf(f)}:${f.lineNumber + 1}`;

/** Sums one or more profiles: self time by area and by function, inclusive time by area and under frames matching `under` (ms). */
export function sumProfiles(profiles: Profile[], under: RegExp[] = []): ProfileSums {
  const s: ProfileSums = {
    totalMs: 0,
    idleMs: 0,
    selfByArea: new Map(),
    selfByFunction: new Map(),
    inclusiveByArea: new Map(),
    under: new Map(),
    byCategory: new Map(),
  };
  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
  for (const p of profiles) {
    const byId = new Map(p.nodes.map((n) => [n.id, n]));
    const parent = new Map<number, number>();
    for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
    // The areas (and the --under patterns) on each node's stack, computed once per node.
    const areasOnStack = new Map<number, Set<string>>();
    const stackAreas = (id: number): Set<string> => {
      const known = areasOnStack.get(id);
      if (known) return known;
      const up = parent.get(id);
      const set = new Set(up === undefined ? [] : stackAreas(up));
      const f = byId.get(id)!.callFrame;
      set.add(areaOf(f));
      for (const re of under) if (re.test(frameName(f))) set.add(`under:${re.source}`);
      areasOnStack.set(id, set);
      return set;
    };
    const categoryOf = new Map<number, string>();
    const category = (id: number): string => {
      const known = categoryOf.get(id);
      if (known) return known;
      let c = NODE;
      if (SOCKET_WRITES.has(byId.get(id)!.callFrame.functionName)) c = 'socket writes (the kernel: HTTP answers, statements sent)';
      else {
        for (let x: number | undefined = id; x !== undefined; x = parent.get(x)) {
          const area = areaOf(byId.get(x)!.callFrame);
          if (area.startsWith('node:') || area === '(native)' || area === '(root)') continue;
          c = CATEGORIES.find(([, test]) => test(area))?.[0] ?? `other (${area})`;
          break;
        }
      }
      categoryOf.set(id, c);
      return c;
    };
    const first = p.samples.findIndex((id) => stackAreas(id).has('node:_http_common'));
    // timeDeltas[i] is the time before sample i; the time after it (timeDeltas[i + 1]) is what it stands for.
    for (let i = Math.max(0, first); i < p.samples.length; i++) {
      const ms = (p.timeDeltas[i + 1] ?? 0) / 1000;
      const node = byId.get(p.samples[i]!)!;
      const f = node.callFrame;
      if (f.functionName === '(idle)') {
        s.idleMs += ms;
        continue;
      }
      s.totalMs += ms;
      add(s.selfByArea, areaOf(f), ms);
      add(s.selfByFunction, frameName(f), ms);
      add(s.byCategory, category(node.id), ms);
      for (const a of stackAreas(node.id)) add(a.startsWith('under:') ? s.under : s.inclusiveByArea, a.slice(a.startsWith('under:') ? 6 : 0), ms);
    }
  }
  return s;
}

function print(title: string, m: Map<string, number>, total: number, jobs: number | undefined, top: number): void {
  console.log(`\n${title}`);
  console.log(`| ${title.split(' ')[0]} | ms | share |${jobs ? ' ms per job |' : ''}`);
  console.log(`|---|---|---|${jobs ? '---|' : ''}`);
  for (const [k, v] of [...m].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(`| ${k} | ${v.toFixed(0)} | ${((100 * v) / total).toFixed(1)} % |${jobs ? ` ${(v / jobs).toFixed(4)} |` : ''}`);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { jobs: { type: 'string' }, top: { type: 'string', default: '30' }, under: { type: 'string', multiple: true, default: [] } },
  });
  const jobs = values.jobs ? Number(values.jobs) : undefined;
  const top = Number(values.top);
  const s = sumProfiles(
    positionals.map((f) => JSON.parse(readFileSync(f, 'utf8')) as Profile),
    values.under.map((u) => new RegExp(u)),
  );
  console.log(
    `busy ${s.totalMs.toFixed(0)} ms, idle ${s.idleMs.toFixed(0)} ms${jobs ? `; ${jobs} jobs: ${(s.totalMs / jobs).toFixed(3)} ms busy per job` : ''}`,
  );
  print('category (what the stack was doing)', s.byCategory, s.totalMs, jobs, top);
  print('area (self time)', s.selfByArea, s.totalMs, jobs, top);
  print('area (inclusive: on the stack)', s.inclusiveByArea, s.totalMs, jobs, top);
  print('function (self time)', s.selfByFunction, s.totalMs, jobs, top);
  if (s.under.size) print('under (inclusive)', s.under, s.totalMs, jobs, top);
}
