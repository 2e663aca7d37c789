// Waiting in tests: for a state, polled, never for a fixed time (CI machines are loaded).

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * One turn of the event loop (setImmediate), not a wait for time: what is already under way
 * (settled promises, I/O callbacks) runs first. For tests that drive code step by step, as
 * test/dispatcher.test.ts drives the dispatcher's lease rounds.
 */
export const tick = () => new Promise<void>((r) => setImmediate(r));

/** Polls a state every 20 ms (never a fixed wait) until it holds, or fails after ms saying what was awaited (and `detail`). */
export async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 30_000, detail?: () => Promise<string>): Promise<void> {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(20)) if (await ok()) return;
  throw new Error(`timed out waiting for ${what}${detail ? `: ${await detail()}` : ''}`);
}
