// The `node` label of the per-node latency metrics (src/http/metrics.ts NodeLabels): a node's name
// for the first MAX_NODE_LABELS nodes, "other" after them (bounded series), "none" without a node;
// each name read once, and read again after a failed read.
import { describe, expect, it } from 'vitest';
import { MAX_NODE_LABELS, NodeLabels } from '../src/http/metrics.js';

describe('NodeLabels', () => {
  it('names the first MAX_NODE_LABELS nodes, each read once, and calls the rest "other"', async () => {
    const reads: number[] = [];
    const labels = new NodeLabels((id) => {
      reads.push(id);
      return Promise.resolve(`node-${id}`);
    });
    expect(await labels.of(null)).toBe('none');
    for (let id = 1; id <= MAX_NODE_LABELS; id++) expect(await labels.of(id)).toBe(`node-${id}`);
    expect(await labels.of(MAX_NODE_LABELS + 1)).toBe('other');
    expect(await labels.of(1)).toBe('node-1');
    expect(reads).toHaveLength(MAX_NODE_LABELS);
  });

  it('reads a name again after a failed read, and calls an unknown node "other"', async () => {
    let fail = true;
    const labels = new NodeLabels((id) => (fail ? Promise.reject(new Error('database away')) : Promise.resolve(id === 7 ? 'rig-7' : undefined)));
    expect(await labels.of(7)).toBe('other');
    fail = false;
    expect(await labels.of(7)).toBe('rig-7');
    expect(await labels.of(8)).toBe('other');
  });
});
