// What a node transition changed — the one shape every statement of src/nodes/sql/ returns and
// every consumer applies (nodes/lifecycle.ts apply()): the key and session cache, the
// dispatcher, the metrics. Each statement announces it through the database function
// nodes_announce() (migrations/0016_node_lifecycle.sql), whose item text this module reads, so
// an outcome reads the same whether this server's statement made it or another server's did.
import { NODE_CHANGES, type NodeChange } from './states.js';

/** The channel: the one key caches have always listened on (repositories/key-events.ts). */
export { KEY_EVENTS_CHANNEL as NODES_CHANNEL } from '../repositories/key-events.js';

export interface NodeOutcome {
  change: NodeChange;
  /** null: not about one node (a reader or user key changed, or an announcement of unknown form). */
  nodeId: number | null;
  /** The session opened, ended or redeclared (register, deregister, declare). */
  sessionId: number | null;
}

/** Whoever acts on node outcomes; `local`: this server's statement made it (else another server's or process's). */
export interface NodeConsumer {
  apply(outcome: NodeOutcome, local: boolean): void;
  /** Announcements are reliable (LISTEN live) or may have been missed. */
  setLive?(live: boolean): void;
}

const CHANGES: ReadonlySet<string> = new Set(NODE_CHANGES);
const id = (s: string | undefined): number | null => (s === undefined || s === '' ? null : Number(s));

/** The outcome an item (nodes_announce's format) says; anything else reads as "keys changed": every cache forgets. */
export function parseItem(item: string): NodeOutcome {
  const [change, node, session] = item.split(':');
  if (change === undefined || !CHANGES.has(change)) return { change: 'keys', nodeId: null, sessionId: null };
  return { change: change as NodeChange, nodeId: id(node), sessionId: id(session) };
}

/** The item nodes_announce() writes for the outcome. */
export function itemOf(o: NodeOutcome): string {
  return `${o.change}:${o.nodeId ?? ''}:${o.sessionId ?? ''}`;
}

/** A NOTIFY payload: its sender's server id (empty: unknown) and the outcome. */
export function parsePayload(payload: string): { server: string; outcome: NodeOutcome } {
  const space = payload.indexOf(' ');
  if (space < 0) return { server: payload, outcome: parseItem('') };
  return { server: payload.slice(0, space), outcome: parseItem(payload.slice(space + 1)) };
}

/** Whether the node can no longer take jobs through what it held: its key, its sessions, or a session (sessionId). */
export function endsAccess(o: NodeOutcome): boolean {
  return o.change === 'disabled' || o.change === 'rotated' || o.change === 'suspended' || o.change === 'deregistered';
}
