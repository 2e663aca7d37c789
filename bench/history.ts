// Deterministic synthetic history for the benchmark: nodes with keys the bench can use, and
// results over the last N days with a skewed model popularity (model k is chosen with weight
// 1/(k+1)), written as the CSV files `ins import` reads. Same flags, same files, byte for byte.
import { createHash } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, renameSync } from 'node:fs';
import { once } from 'node:events';
import path from 'node:path';

export interface HistoryOptions {
  nodes: number;
  models: number;
  results: number;
  days: number;
  success: number;
  seed: number;
}

/** Park–Miller generator: tiny, fast and reproducible. */
export class Random {
  private state: number;
  constructor(seed: number) {
    this.state = (seed % 2147483646) + 1;
  }
  next(): number {
    this.state = (this.state * 48271) % 2147483647;
    return (this.state - 1) / 2147483646;
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
}

export const nodeName = (i: number): string => `bench-node-${String(i).padStart(5, '0')}`;
export const nodeKey = (seed: number, i: number): string => `nk_${createHash('sha256').update(`bench:${seed}:${i}`).digest('base64url')}`;
export const modelName = (k: number): string => `bench-model-${String(k).padStart(2, '0')}:latest`;

export function modelPicker(models: number, rnd: Random): () => number {
  const cumulative: number[] = [];
  let total = 0;
  for (let k = 0; k < models; k++) cumulative.push((total += 1 / (k + 1)));
  return () => {
    const x = rnd.next() * total;
    let lo = 0;
    let hi = models - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cumulative[mid]! < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

async function writeLines(file: string, lines: Iterable<string>): Promise<void> {
  const tmp = `${file}.tmp`;
  const out = createWriteStream(tmp);
  let chunk: string[] = [];
  for (const line of lines) {
    chunk.push(line);
    if (chunk.length >= 10_000) {
      if (!out.write(chunk.join('\n') + '\n')) await once(out, 'drain');
      chunk = [];
    }
  }
  out.end(chunk.length ? chunk.join('\n') + '\n' : '');
  await once(out, 'finish');
  renameSync(tmp, file);
}

/** Writes (or reuses) the two CSV files; `now` is rounded to the hour so reruns match. */
export async function ensureHistory(dir: string, o: HistoryOptions, now: number): Promise<{ nodesFile: string; resultsFile: string }> {
  mkdirSync(dir, { recursive: true });
  const tag = `n${o.nodes}-m${o.models}-r${o.results}-d${o.days}-s${o.success}-seed${o.seed}-t${now}`;
  const nodesFile = path.join(dir, `nodes-${tag}.csv`);
  const resultsFile = path.join(dir, `results-${tag}.csv`);
  if (!existsSync(nodesFile)) {
    await writeLines(
      nodesFile,
      (function* () {
        yield 'name,api_key';
        for (let i = 0; i < o.nodes; i++) yield `${nodeName(i)},${nodeKey(o.seed, i)}`;
      })(),
    );
  }
  if (!existsSync(resultsFile)) {
    const rnd = new Random(o.seed);
    const pickModel = modelPicker(o.models, rnd);
    const span = o.days * 86_400_000;
    // History ends an hour before `now`, so reports made during the run are the newest.
    const end = now - 3_600_000;
    await writeLines(
      resultsFile,
      (function* () {
        yield 'job_id,node_name,model_name,status,points,received_at';
        for (let i = 0; i < o.results; i++) {
          const ok = rnd.next() < o.success;
          const at = new Date(end - Math.floor(rnd.next() * span)).toISOString();
          yield `h-${i},${nodeName(rnd.int(o.nodes))},${modelName(pickModel())},${ok ? 'success' : 'error'},${ok ? 1 : 0},${at}`;
        }
      })(),
    );
  }
  return { nodesFile, resultsFile };
}
