// ins node …, ins key …, ins model …: the network's nodes, keys and models.
import { listNodes } from '../repositories/nodes.js';
import { NodeExistsError } from '../nodes/lifecycle.js';
import { keyUsage, listApiKeys, resolveKey, type ApiKeyKind } from '../repositories/api-keys.js';
import { addApiKey, setKeyDelivery, setKeyPriority, setKeyQuota } from '../nodes/api-keys.js';
import { listModels, setModelPoints } from '../repositories/models.js';
import { parsePrice, PRICE_RULE } from '../points-value.js';
import { checkName, keyCommand, listCommand, operatorNodes, type Command } from './command.js';
import { CommandError, table, UsageError } from './io.js';
import { wholeNumber } from '../whole-number.js';

function setDisabledCommand(disabled: boolean): Command {
  const verb = disabled ? 'disable' : 'enable';
  return {
    usage: `node ${verb} NAME`,
    summary: disabled
      ? 'disable a node: its key gets 403, its sessions end and the jobs it holds go back to the queue'
      : 'enable a disabled node again',
    args: ['NAME'],
    async run(db, [name], opts, io) {
      // Disabling hands the jobs it holds back to the queue (nodes/lifecycle.ts): they go to other nodes.
      const nodes = operatorNodes(db, opts);
      const id = disabled ? await nodes.disable(name!) : await nodes.enable(name!);
      if (id === undefined) throw new CommandError(`no node named "${name}"`);
      io.out(opts.json ? JSON.stringify({ name, disabled }) : `node "${name}" ${verb}d`);
    },
  };
}

const KEY_KINDS: Record<ApiKeyKind, { prefix: string; purpose: string }> = {
  reader: { prefix: 'rk_', purpose: "for dashboards: reads any node's points" },
  user: { prefix: 'uk_', purpose: 'for applications: submits jobs and reads their results' },
};

function addKeyCommand(kind: ApiKeyKind): Command {
  return keyCommand({
    usage: `key add-${kind} LABEL`,
    summary: `create a ${kind} key (${KEY_KINDS[kind].prefix}…) ${KEY_KINDS[kind].purpose}; printed once`,
    arg: 'LABEL',
    maxLength: 128,
    async issue(db, label) {
      const { id, key } = await addApiKey(db, kind, label);
      return { fields: { id, kind, label }, key, note: `${kind[0]!.toUpperCase()}${kind.slice(1)} key ${id} ("${label}") created.` };
    },
  });
}

const list = (items: string[]): string => (items.length ? items.join(',') : '-');

export const NETWORK_COMMANDS: Record<string, Command> = {
  'node add': keyCommand({
    usage: 'node add NAME',
    summary: 'create a node and print its key (nk_…) once',
    arg: 'NAME',
    maxLength: 128,
    async issue(db, name, opts) {
      try {
        const { key } = await operatorNodes(db, opts).add(name);
        return { fields: { name }, key, note: `Node "${name}" created.` };
      } catch (err) {
        if (err instanceof NodeExistsError) throw new CommandError(`${err.message}; use "ins node rotate-key ${name}" for a new key`);
        throw err;
      }
    },
  }),
  'node list': listCommand({
    usage: 'node list',
    summary: 'list nodes: status, standing (verification), online, last seen, models declared, jobs held, points',
    load: (db, { coordinator: c }) => listNodes(db, c.onlineWindow, c.modelsTtl),
    empty: 'no nodes yet; create one with: ins node add NAME',
    columns: ['NAME', 'STATUS', 'STANDING', 'ONLINE', 'LAST_SEEN', 'MODELS', 'LEASES', 'TOTAL_POINTS', 'LAST_DAY_WITH_POINTS', 'CREATED'],
    row: (n) => [
      n.name,
      n.disabled ? 'disabled' : 'active',
      n.standing,
      n.online ? 'online' : 'offline',
      n.last_seen_at ?? '-',
      list(n.models),
      String(n.open_leases),
      String(n.total_points),
      n.last_day_with_points ?? '-',
      n.created_at,
    ],
  }),
  'node disable': setDisabledCommand(true),
  'node enable': setDisabledCommand(false),
  'node rotate-key': keyCommand({
    usage: 'node rotate-key NAME',
    summary: 'give a node a new key; the old one and its sessions stop working at once',
    arg: 'NAME',
    async issue(db, name, opts) {
      // The old key's sessions are void: the jobs they hold go back to the queue (nodes/lifecycle.ts).
      const rotated = await operatorNodes(db, opts).rotate(name);
      if (!rotated) throw new CommandError(`no node named "${name}"`);
      const { key } = rotated;
      return { fields: { name }, key, note: `New key for node "${name}"; the old key no longer works.` };
    },
  }),
  'key add-reader': addKeyCommand('reader'),
  'key add-user': addKeyCommand('user'),
  'key list': listCommand({
    usage: 'key list',
    summary: 'list reader and user keys (ids, kinds and labels, never the keys)',
    load: listApiKeys,
    empty: 'no keys; create one with: npx ins key add-reader LABEL or npx ins key add-user LABEL',
    columns: ['ID', 'KIND', 'LABEL', 'STATUS', 'DELIVERY', 'CREATED'],
    row: (k) => [String(k.id), k.kind, k.label, k.revoked ? 'revoked' : 'active', k.kind === 'user' ? k.delivery : '-', k.created_at],
  }),
  'key revoke': {
    usage: 'key revoke ID|LABEL',
    summary: 'revoke a reader or user key by id or by its (unique) label',
    args: ['ID|LABEL'],
    async run(db, [which], opts, io) {
      const { json } = opts;
      // A transition of the node lifecycle (nodes/sql/keys.ts): announced in its transaction.
      const r = await operatorNodes(db, opts).revokeKey(which!);
      if ('error' in r) throw new CommandError(r.error);
      io.out(json ? JSON.stringify({ id: r.id, revoked: true }) : `key ${r.id} revoked`);
    },
  },
  'key set-quota': {
    usage: 'key set-quota ID|LABEL [--jobs N|default] [--tokens N|default]',
    summary:
      'a user key\'s daily quotas (UTC day): jobs and output tokens; "default" clears one back to DEFAULT_QUOTA_JOBS / DEFAULT_QUOTA_TOKENS (unset there: no limit)',
    args: ['ID|LABEL'],
    flags: ['jobs', 'tokens'],
    async run(db, [which], { json, filter }, io) {
      const parse = (flag: string, v: string | undefined): number | null | undefined => {
        if (v === undefined) return undefined;
        if (v === 'default') return null;
        const n = wholeNumber(v, 0, 999_999_999_999_999);
        if (n === undefined) throw new UsageError(`--${flag} takes a whole number >= 0 or "default" (got "${v}")`);
        return n;
      };
      const jobs = parse('jobs', filter.jobs);
      const tokens = parse('tokens', filter.tokens);
      if (jobs === undefined && tokens === undefined) throw new UsageError('give --jobs, --tokens or both');
      const r = await setKeyQuota(db, which!, jobs, tokens);
      if ('error' in r) throw new CommandError(r.error);
      // JSON: the key's quotas as they now are, changed or not (null: the configured default applies).
      const shown = (v: number | null | undefined) => (v === undefined ? 'unchanged' : v === null ? 'default' : String(v));
      io.out(
        json
          ? JSON.stringify({ id: r.id, jobs: r.jobs, tokens: r.tokens })
          : `key ${r.id}: jobs per day ${shown(jobs)}, output tokens per day ${shown(tokens)}`,
      );
    },
  },
  'key set-priority': {
    usage: 'key set-priority ID|LABEL N',
    summary:
      "a user key's weight in each model's fair queue (a number > 0, at most 1000; default 1): with 2, it is served twice as often as a key with 1 while both wait",
    args: ['ID|LABEL', 'N'],
    async run(db, [which, raw], { json }, io) {
      const n = Number(raw);
      if (!/^\d+(\.\d+)?$/.test(raw!) || !(n > 0 && n <= 1000)) throw new UsageError(`N must be a number > 0 and at most 1000 (got "${raw}")`);
      const r = await setKeyPriority(db, which!, n);
      if ('error' in r) throw new CommandError(r.error);
      io.out(json ? JSON.stringify({ id: r.id, priority: n }) : `key ${r.id}: priority ${n}`);
    },
  },
  'key set-delivery': {
    usage: 'key set-delivery ID|LABEL checked|immediate',
    summary:
      "a user key's delivery: checked gives each answer only once another node's check of it passed (a failed one is run again; docs/verification.md), immediate (the default) as soon as a node answers",
    args: ['ID|LABEL', 'checked|immediate'],
    async run(db, [which, raw], { json }, io) {
      if (raw !== 'checked' && raw !== 'immediate') throw new UsageError(`delivery must be "checked" or "immediate" (got "${raw}")`);
      const r = await setKeyDelivery(db, which!, raw);
      if ('error' in r) throw new CommandError(r.error);
      io.out(json ? JSON.stringify({ id: r.id, delivery: raw }) : `key ${r.id}: delivery ${raw}`);
    },
  },
  'key usage': {
    usage: 'key usage ID|LABEL',
    summary: "a user key's usage today (UTC) against its daily quota, in total and per model (what GET /usage shows)",
    args: ['ID|LABEL'],
    async run(db, [which], { json, coordinator }, io) {
      const r = await resolveKey(db, which!, 'ask');
      if ('error' in r) throw new CommandError(r.error);
      const u =
        r.id === undefined ? undefined : await keyUsage(db, r.id, { jobs: coordinator.quotaJobs ?? null, tokens: coordinator.quotaTokens ?? null });
      if (!u) throw new CommandError(`no user key "${which}"`);
      if (json) return io.out(JSON.stringify(u));
      const of = (used: number, quota: number | null) => `${used}${quota === null ? ' (no limit)' : ` of ${quota}`}`;
      io.out(
        `${u.day} (UTC): jobs ${of(u.used.jobs, u.quota.jobs)}, output tokens ${of(u.used.tokens, u.quota.tokens)}; priority ${u.priority}; delivery ${u.delivery}`,
      );
      if (u.checking.jobs > 0)
        io.out(`checked jobs ${u.checking.jobs}: ${u.checking.checks} check jobs, ${u.checking.tokens} tokens, ${u.checking.points} points`);
      for (const line of table([['MODEL', 'JOBS', 'TOKENS'], ...u.models.map((m) => [m.model, String(m.jobs), String(m.tokens)])])) io.out(line);
    },
  },
  'model set-points': {
    usage: 'model set-points MODEL POINTS',
    summary: 'points a success of MODEL earns (a number >= 0, or "default")',
    args: ['MODEL', 'POINTS'],
    async run(db, [model, raw], { json }, io) {
      checkName('MODEL', model!, 256);
      const points = raw === 'default' ? null : parsePrice(raw!);
      if (points === undefined) {
        throw new UsageError(`POINTS must be ${PRICE_RULE}, or "default"; got "${raw}"`);
      }
      const { created } = await setModelPoints(db, model!, points);
      // Setting a model's points before its first node is allowed (prices set ahead), but a
      // misspelt name would silently price a model nobody serves: say so.
      if (created) io.err(`note: "${model}" is a new model: no node has declared or reported it yet (\`ins model list\` shows the known ones)`);
      io.out(
        json
          ? JSON.stringify({ model, points_per_job: points, created })
          : `model "${model}": ${points === null ? 'default points' : `${points} points per job`}`,
      );
    },
  },
  'model list': listCommand({
    usage: 'model list',
    summary: 'list models with their points per job and number of nodes',
    load: listModels,
    empty: 'no models yet: they appear with the first report',
    columns: ['MODEL', 'POINTS_PER_JOB', 'NODES'],
    row: (m) => [m.name, m.points_per_job === null ? 'default' : String(m.points_per_job), String(m.nodes)],
  }),
};
