// The notifications that tie servers together, sent by the same statement that makes the
// change (so only once it commits) and heard by every server, the sender included — which
// skips its own, having acted on the statement's answer already:
// - JOBS_CHANNEL: jobs of these models became queued (submitted, or back in the queue), so
//   waiting workers of those models are offered them (jobs/dispatcher.ts).
//   Payload: `<server> <model id>:<jobs>,<model id>:<jobs>…`; an item ending in `:c` counts
//   copies made to check a job (src/verify/), which only some nodes may take.
// - RESULTS_CHANNEL: these jobs reached a final state, so whoever waits for them answers
//   (jobs/watch.ts). Payload: `<server> <job id>,<job id>…`.
// NOTIFY payloads are at most 8000 bytes: statements send one per batch of at most a few
// hundred jobs.
export const JOBS_CHANNEL = 'ins_jobs';
export const RESULTS_CHANNEL = 'ins_results';

export interface Payload { server: string; items: string[] }

export function parsePayload(payload: string): Payload {
  const space = payload.indexOf(' ');
  if (space < 0) return { server: payload, items: [] };
  return { server: payload.slice(0, space), items: payload.slice(space + 1).split(',').filter(Boolean) };
}

/** `model:count` items, as jobs and copies (`model:count:c`) per model. */
export function jobsAndCopies(items: string[]): { jobs: Map<number, number>; copies: Map<number, number> } {
  return { jobs: modelCounts(items.filter((i) => !i.endsWith(':c'))), copies: modelCounts(items.filter((i) => i.endsWith(':c'))) };
}

/** `model:count` items as a map. */
export function modelCounts(items: string[]): Map<number, number> {
  const out = new Map<number, number>();
  for (const item of items) {
    const [model, count] = item.split(':');
    const id = Number(model);
    if (Number.isInteger(id)) out.set(id, (out.get(id) ?? 0) + Math.max(1, Number(count) || 1));
  }
  return out;
}
