// Declaring the models a worker session serves (POST /worker/update_models; the route is its
// schema, the checks of the body's shape and the refusals' statuses): the names that can be no
// model's are left out, not the declaration refused (the seed's worker stops for hours on a 422
// over one odd entry of its backend's list, an outside probe); a node brings at most
// NEW_MODELS_PER_NODE_PER_DAY new names into being a UTC day and serves at most MODELS_PER_NODE
// over its sessions, checked before any name is made, so a refused declaration changes nothing
// (concurrent ones race past by at most their number). Then the session's set and its builds, one
// statement (sql/declare.ts; announced when the set changed: sessions are cached with their models).
import type { Database } from '../db/database.js';
import { ensureModelIdFor, newModelsForNode } from '../repositories/models.js';
import type { DeclaredSet, ModelBuild } from './sql/declare.js';

export type { ModelBuild };

/** New model names one node may bring into being per UTC day (migrations/0029): as a user key may (jobs/submit.ts). */
export const NEW_MODELS_PER_NODE_PER_DAY = 100;
/** Models one node may serve over all its sessions, and name in one declaration. */
export const MODELS_PER_NODE = 1000;

/** What a session declares, by model name: capability bits (undefined: the worker declared none, the seed's), builds, context lengths. */
export interface Declaration {
  models: string[];
  caps?: Map<string, number>;
  builds: Map<string, ModelBuild>;
  contexts: Map<string, number>;
}

/** A declaration refused as a whole (nothing declared): the reason, for a 400. */
export class DeclarationRefused extends Error {}

/** A model's name as the network stores it: 1 to 256 characters (openapi.json's model_name). */
const isModelName = (m: string): boolean => m.length >= 1 && (m.length <= 256 || [...m].length <= 256);

const tooManyNames = (unknown: number, today: number) =>
  new DeclarationRefused(
    `this declaration names ${unknown} models the network does not know, and this node named ${today} new ones today (UTC): a node may name at most ${NEW_MODELS_PER_NODE_PER_DAY} a day. Nothing was declared; declare the models the network knows, or the others after 00:00 UTC`,
  );

/** The session's step of the node lifecycle (nodes/lifecycle.ts declare): whether the set changed; undefined: no live session. */
export type DeclareSet = (sessionId: number, modelIds: number[], d: DeclaredSet) => Promise<boolean | undefined>;

/**
 * Declares the session's models; the names declared (sorted) and those left out, or undefined
 * when the session is not live. Throws DeclarationRefused.
 */
export async function declareSession(
  db: Database,
  set: DeclareSet,
  session: { id: number; nodeId: number },
  d: Declaration,
  windows: { onlineWindow: number; modelsTtl: number },
): Promise<{ names: string[]; ignored: string[] } | undefined> {
  if (d.models.length > MODELS_PER_NODE)
    throw new DeclarationRefused(`${d.models.length} models named: a node may serve at most ${MODELS_PER_NODE}. Nothing was declared`);
  const ignored = [...new Set(d.models.filter((m) => !isModelName(m)))];
  const names = [...new Set(d.models.filter(isModelName))].sort();
  const { unknown, today, served } = await newModelsForNode(db, names, session.nodeId, session.id, windows);
  if (unknown > 0 && today + unknown > NEW_MODELS_PER_NODE_PER_DAY) throw tooManyNames(unknown, today);
  // Names a node's reports brought into being (CREDIT_POLICY=reports takes any model_name) are
  // known, so it is this bound that keeps one node from filling the public model lists.
  if (served > MODELS_PER_NODE) {
    throw new DeclarationRefused(
      `with this declaration the node would serve ${served} models over its sessions: a node may serve at most ${MODELS_PER_NODE}. Nothing was declared`,
    );
  }
  const ids: number[] = [];
  const built = new Map<number, ModelBuild>();
  const caps = d.caps ? new Map<number, number>() : undefined;
  const contexts = new Map<number, number>();
  for (const name of names) {
    const id = await ensureModelIdFor(db, name, { node: session.nodeId }, NEW_MODELS_PER_NODE_PER_DAY);
    if (id === undefined) throw tooManyNames(unknown, today);
    ids.push(id);
    if (caps && d.caps!.has(name)) caps.set(id, d.caps!.get(name)!);
    if (d.builds.has(name)) built.set(id, d.builds.get(name)!);
    if (d.contexts.has(name)) contexts.set(id, d.contexts.get(name)!);
  }
  if ((await set(session.id, ids, { caps, contexts, builds: built })) === undefined) return undefined;
  return { names, ignored };
}
