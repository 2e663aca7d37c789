// ins node …, ins key …, ins model …: the network's nodes, keys and models.
import { createNode, listNodes, NodeExistsError, rotateNodeKey, setNodeDisabled } from '../repositories/nodes.js';
import { addApiKey, listApiKeys, revokeApiKey, type ApiKeyKind } from '../repositories/api-keys.js';
import { listModels, setModelPoints } from '../repositories/models.js';
import { parsePoints } from '../points-value.js';
import { checkName, keyCommand, listCommand, operatorJobs, type Command } from './command.js';
import { CommandError, UsageError } from './io.js';

function setDisabledCommand(disabled: boolean): Command {
  const verb = disabled ? 'disable' : 'enable';
  return {
    usage: `node ${verb} NAME`,
    summary: disabled ? 'disable a node: its key gets 403, its sessions end and the jobs it holds go back to the queue' : 'enable a disabled node again',
    args: ['NAME'],
    async run(db, [name], opts, io) {
      const id = await setNodeDisabled(db, name!, disabled);
      if (id === undefined) throw new CommandError(`no node named "${name}"`);
      // Its job keys earn nothing from now on: the jobs go to other nodes.
      if (disabled) await operatorJobs(db, opts).release({ nodeId: id }, 'released');
      io.out(opts.json ? JSON.stringify({ name, disabled }) : `node "${name}" ${verb}d`);
    },
  };
}

const KEY_KINDS: Record<ApiKeyKind, { prefix: string; purpose: string }> = {
  reader: { prefix: 'rk_', purpose: 'for dashboards: reads any node\'s points' },
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
    summary: "create a node and print its key (nk_…) once",
    arg: 'NAME',
    maxLength: 128,
    async issue(db, name) {
      try {
        const { key } = await createNode(db, name);
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
    empty: 'no nodes yet; create one with: npx ins node add NAME',
    columns: ['NAME', 'STATUS', 'STANDING', 'ONLINE', 'LAST_SEEN', 'MODELS', 'LEASES', 'TOTAL_POINTS', 'LAST_DAY_WITH_POINTS', 'CREATED'],
    row: (n) => [n.name, n.disabled ? 'disabled' : 'active', n.standing, n.online ? 'online' : 'offline', n.last_seen_at ?? '-', list(n.models),
      String(n.open_leases), String(n.total_points), n.last_day_with_points ?? '-', n.created_at],
  }),
  'node disable': setDisabledCommand(true),
  'node enable': setDisabledCommand(false),
  'node rotate-key': keyCommand({
    usage: 'node rotate-key NAME',
    summary: 'give a node a new key; the old one and its sessions stop working at once',
    arg: 'NAME',
    async issue(db, name, opts) {
      const rotated = await rotateNodeKey(db, name);
      if (!rotated) throw new CommandError(`no node named "${name}"`);
      // The old key's sessions are void: the jobs they hold go back to the queue.
      await operatorJobs(db, opts).release({ nodeId: rotated.id }, 'released');
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
    columns: ['ID', 'KIND', 'LABEL', 'STATUS', 'CREATED'],
    row: (k) => [String(k.id), k.kind, k.label, k.revoked ? 'revoked' : 'active', k.created_at],
  }),
  'key revoke': {
    usage: 'key revoke ID|LABEL',
    summary: 'revoke a reader or user key by id or by its (unique) label',
    args: ['ID|LABEL'],
    async run(db, [which], { json }, io) {
      const r = await revokeApiKey(db, which!);
      if ('error' in r) throw new CommandError(r.error);
      io.out(json ? JSON.stringify({ id: r.id, revoked: true }) : `key ${r.id} revoked`);
    },
  },
  'model set-points': {
    usage: 'model set-points MODEL POINTS',
    summary: 'points a success of MODEL earns (a number >= 0, or "default")',
    args: ['MODEL', 'POINTS'],
    async run(db, [model, raw], { json }, io) {
      checkName('MODEL', model!, 256);
      const points = raw === 'default' ? null : parsePoints(raw!);
      if (points === undefined) {
        throw new UsageError(`POINTS must be a number >= 0 (e.g. 1 or 2.5) or "default", got "${raw}"`);
      }
      await setModelPoints(db, model!, points);
      io.out(json ? JSON.stringify({ model, points_per_job: points }) : `model "${model}": ${points === null ? 'default points' : `${points} points per job`}`);
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
