// Probes: jobs the coordinator makes up to check the nodes of a model, at random times (each
// model two or more nodes serve gets one per VERIFY_PROBE_INTERVAL on average). Their prompts
// are drawn at random from templates and word lists each time, so no two are alike and no list
// of "control prompts" exists for a farming tool to store answers for. On the wire a probe is a
// job like any other (temperature 0, a seed, a max_output users pick, streamed as often as
// STREAMED_SHARE of them: a node must not be able to tell that streamed jobs are never checked);
// nobody reads its answer,
// and every probe is run again by another node and the answers compared (verify/auditor.ts).
// A model only one node serves cannot be checked that way: it gets a canary instead, at the same
// rate (verify/canaries.ts): an earlier request whose answer three nodes agreed on.
import { randomInt, randomUUID } from 'node:crypto';
import { sql, type Queryable } from '../db/database.js';
import { chatsSql } from '../jobs/capabilities.js';
import { servingSession } from '../db/rules/live.js';
import type { Outcome } from '../jobs/outcome.js';
import { randomSeed, type JobRequest } from '../jobs/request.js';
import type { Check } from '../jobs/sql/queue-checks.js';
import { eligibleNodes, type CheckQueue } from './copies.js';
import { canaries } from './canaries.js';

const TOPICS = [
  'the ocean',
  'a lighthouse',
  'bread',
  'winter',
  'a bicycle',
  'the moon',
  'a library',
  'rivers',
  'volcanoes',
  'a garden',
  'trains',
  'honey bees',
  'a violin',
  'mountains',
  'coffee',
  'a desert',
  'clocks',
  'rain',
  'a market',
  'glaciers',
  'paper',
  'owls',
  'a bridge',
  'salt',
  'the first computers',
  'tides',
  'a city at night',
  'maps',
  'mushrooms',
  'a harbour',
  'thunderstorms',
  'chess',
  'letters by post',
  'wool',
];
const STYLES = [
  'one sentence',
  'two short sentences',
  'a short paragraph',
  'three bullet points',
  'a haiku',
  'one question and its answer',
  'a list of four facts',
  'a short dialogue',
  'five words',
  'a limerick',
];
const WORDS = [
  'quiet',
  'bright',
  'ancient',
  'small',
  'heavy',
  'gentle',
  'distant',
  'careful',
  'golden',
  'narrow',
  'patient',
  'sudden',
  'curious',
  'hollow',
];
const TEMPLATES = [
  (t: string, s: string, w: string) => `Write ${s} about ${t}. Use the word "${w}".`,
  (t: string, s: string, w: string) => `Describe ${t} in ${s}, and make it feel ${w}.`,
  (t: string, s: string, w: string) => `In ${s}, explain why ${t} can seem ${w}.`,
  (t: string, s: string, w: string) => `Give ${s} that a child could understand about ${t}; include "${w}".`,
  (t: string, s: string, w: string) => `I need ${s} on ${t} for a ${w} mood. Can you help?`,
  (t: string, s: string, w: string) => `${t[0]!.toUpperCase()}${t.slice(1)}: ${s}, please, ${w} in tone.`,
];
const MAX_OUTPUTS = [0, 0, 64, 128, 256, 512];
/** The share of probes that ask for a streamed answer (as OpenAI-style clients do). */
export const STREAMED_SHARE = 0.5;
const pick = <T>(list: readonly T[]): T => list[randomInt(list.length)]!;

export function probePrompt(): string {
  return pick(TEMPLATES)(pick(TOPICS), pick(STYLES), pick(WORDS));
}

/** A probe's request: the job_data fields a user's job has, streamed for a share of them. */
export function probeRequest(): JobRequest {
  return {
    messages: [{ role: 'user', content: probePrompt() }],
    max_output: pick(MAX_OUTPUTS),
    temperature: 0,
    seed: randomSeed(),
    ...(Math.random() < STREAMED_SHARE ? { stream: true } : {}),
  };
}

// Issue 53: the nodes serving each of the models $1 now ($2 the online window, $3 MODELS_TTL)
// whose capabilities do not fit a probe, a chat job: those serving the model as an embedding
// model only (jobs/capabilities.ts chatsSql). A probe is a plain job, which the lease round
// offers any node of its model: without this, such a node could take it and fail it with its
// backend's error, a failure counted against an honest node.
const UNFIT = sql(
  'verify_probe_unfit_nodes',
  `SELECT d.model_id, array_agg(DISTINCT s.node_id)::int[] AS nodes
  FROM node_sessions s JOIN nodes n ON n.id = s.node_id CROSS JOIN LATERAL unnest(s.models, s.model_caps) AS d(model_id, caps)
  WHERE d.model_id = ANY($1::int[]) AND NOT ${chatsSql('d.caps')} AND ${servingSession('s', 'n', '$2', '$3')}
  GROUP BY d.model_id`,
);

export interface ProbeOptions {
  onlineWindow: number;
  modelsTtl: number;
  deadline: number;
  chance: number;
  checks: CheckQueue;
}

/**
 * Each model two or more good nodes serve gets a probe with probability `chance`, and each one
 * good node alone serves, a canary if a reference it never saw is stored; answers the models probed, those sent a canary, and the outcome to apply once the
 * transaction commits.
 */
export async function probe(db: Queryable, o: ProbeOptions): Promise<{ models: number[]; canaries: number[]; outcome: Outcome | undefined }> {
  const drawn = [...(await eligibleNodes(db, null, o.onlineWindow, o.modelsTtl))].filter(() => Math.random() < o.chance);
  const models = drawn.filter(([, nodes]) => nodes.length >= 2).map(([model]) => model);
  const lone = drawn.filter(([, nodes]) => nodes.length === 1).map(([modelId, [nodeId]]) => ({ modelId, nodeId: nodeId! }));
  const sent = await canaries(db, lone);
  const unfit = models.length
    ? new Map((await db.query<{ model_id: number; nodes: number[] }>(UNFIT, [models, o.onlineWindow, o.modelsTtl])).map((r) => [r.model_id, r.nodes]))
    : new Map<number, number[]>();
  const checks: Check[] = [
    ...models.map((modelId) => ({ kind: 'probe' as const, id: randomUUID(), modelId, request: probeRequest(), exclude: unfit.get(modelId) ?? [] })),
    ...sent.checks,
  ];
  if (checks.length === 0) return { models, canaries: [], outcome: undefined };
  return { models, canaries: sent.models, outcome: await o.checks.queueChecks(db, checks, o.deadline) };
}
