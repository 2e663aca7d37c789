// How the coordinator checks nodes' answers (docs/verification.md): the settings, their
// defaults (measured: docs/verification.md, "How the network checks answers") and their environment variables.
import type { EnvReader } from './config-env.js';

export interface VerifyConfig {
  /** VERIFY=off: no audits and no probes (suspended nodes stay suspended). */
  enabled: boolean;
  /** Share of temperature-0 jobs also run by another node (0: none but probes, replay suspects and probation): the full rate, falling with a node's run of agreements (verify/check-rate.ts). */
  share: number;
  /** The least share a trusted node with a long run of agreements is checked at (verify/check-rate.ts; at most `share`). */
  floor: number;
  /** Share of a generated answer's points a score check earns per token it scored (the answer's own tokens): measured, docs/verification.md. */
  checkPrice: number;
  /** Two answers agree at this word-set similarity or above (after normalising). */
  similarity: number;
  /** Output tokens per second of lease time above which an answer is implausible (0: off). */
  maxTokensPerSecond: number;
  /** Per-model caps instead of maxTokensPerSecond. */
  modelMaxTokensPerSecond: Record<string, number>;
  /** Answers shorter than this (tokens) are not judged for speed. */
  minTokensForSpeed: number;
  /** Answers shorter than this (words) are not judged for replay: short answers repeat honestly. */
  minWordsForReplay: number;
  /** Strikes within the evidence window that suspend a node. */
  strikesToSuspend: number;
  /** Attempts that end by the node's fault (error reports, leases run out) within the evidence window that make a `failure` strike (0: none). */
  failuresPerStrike: number;
  /** Agreements in a row (no strike) that end a probation. */
  probationAgreements: number;
  /** Seconds: strikes count, answers are remembered, and a suspension reverses points, within this window. */
  evidenceWindow: number;
  /** Seconds between probes of each model two or more nodes serve, on average (0: no probes). */
  probeInterval: number;
  /** Share of answers a scorer found in line that a second scorer scores again (verify/scores.ts), and the only ones that become canary references. */
  spotShare: number;
  /** Seconds done jobs gather before an audit: batches, not a statement per job (0: the next turn of the event loop). */
  auditDelay: number;
}

export const DEFAULT_VERIFY: VerifyConfig = {
  enabled: true,
  share: 0.05,
  floor: 0.01,
  checkPrice: 0.5,
  similarity: 0.5,
  maxTokensPerSecond: 1000,
  modelMaxTokensPerSecond: {},
  minTokensForSpeed: 32,
  minWordsForReplay: 8,
  strikesToSuspend: 3,
  failuresPerStrike: 10,
  probationAgreements: 10,
  evidenceWindow: 86_400,
  probeInterval: 600,
  auditDelay: 0.25,
  spotShare: 0.1,
};

const d = DEFAULT_VERIFY;
export const VERIFY_CONFIG_DOC: [string, string, string][] = [
  ['VERIFY', 'on', 'off: no audits and no probes (docs/verification.md)'],
  [
    'VERIFY_SHARE',
    String(d.share),
    "share of temperature-0 jobs also run by a second node (0 to 1): the full rate, a new node's; less as a node's run of agreements grows (VERIFY_FLOOR)",
  ],
  [
    'VERIFY_FLOOR',
    String(d.floor),
    "the least share of a trusted node's jobs that is checked: the share falls from VERIFY_SHARE as its run of agreements grows, never below this (0 to 1; both 1: every job checked; docs/verification.md)",
  ],
  [
    'VERIFY_CHECK_PRICE',
    String(d.checkPrice),
    "a score check's points per token it scored, as a share of what a generated answer earns per token of it (0 to 1; measured on the gguf backend, docs/verification.md)",
  ],
  ['VERIFY_SIMILARITY', String(d.similarity), 'two answers agree at this word-set similarity or above (0 to 1)'],
  [
    'VERIFY_MAX_TOKENS_PER_SECOND',
    String(d.maxTokensPerSecond),
    'output tokens per second of lease time above which an answer is implausible (0 = off)',
  ],
  ['VERIFY_MODEL_MAX_TOKENS_PER_SECOND', '(none)', 'per-model caps instead, e.g. qwen2.5:0.5b=3000,llama3.2:1b=2000'],
  ['VERIFY_MIN_TOKENS', String(d.minTokensForSpeed), 'shorter answers (tokens) are not judged for speed'],
  ['VERIFY_MIN_WORDS', String(d.minWordsForReplay), 'shorter answers (words) are not judged for replay (near copies: 3 times as long)'],
  ['VERIFY_STRIKES', String(d.strikesToSuspend), 'strikes within the evidence window that suspend a node'],
  [
    'VERIFY_FAILURES',
    String(d.failuresPerStrike),
    "a node's failed attempts within the evidence window that make a failure strike: leases run out, error reports of jobs another node then finished or answered a copy of, leases held until the deadline of jobs another node's copy answered in time (0 = none, and failed jobs are not copied)",
  ],
  ['VERIFY_PROBATION_AGREEMENTS', String(d.probationAgreements), 'agreements in a row that end a probation'],
  [
    'VERIFY_EVIDENCE_WINDOW',
    `${d.evidenceWindow / 3600}h`,
    'strikes count, answers are remembered and a suspension reverses points within this window',
  ],
  ['VERIFY_PROBE_INTERVAL', `${d.probeInterval / 60}m`, 'each model two or more nodes serve gets a probe this often on average (0 = no probes)'],
  [
    'VERIFY_SPOT_SHARE',
    String(d.spotShare),
    'share of answers a scorer found in line that a second scorer scores again (0 to 1): a scorer that clears answers falsely is caught, and only those twice found in line become canary references',
  ],
  ['VERIFY_AUDIT_DELAY', `${d.auditDelay * 1000}ms`, 'done jobs gather this long before they are audited, in one batch (0 = at once)'],
];

function modelCaps(r: EnvReader): Record<string, number> {
  const raw = r.get('VERIFY_MODEL_MAX_TOKENS_PER_SECOND');
  const out: Record<string, number> = {};
  if (raw === undefined) return out;
  for (const item of raw.split(',')) {
    const at = item.lastIndexOf('=');
    const model = item.slice(0, at).trim();
    const cap = item.slice(at + 1).trim();
    if (at <= 0 || !model || !/^\d+$/.test(cap)) {
      r.problems.push(`VERIFY_MODEL_MAX_TOKENS_PER_SECOND: expected MODEL=N[,MODEL=N…], e.g. qwen2.5:0.5b=3000, got ${JSON.stringify(item)}`);
      continue;
    }
    out[model] = Number(cap);
  }
  return out;
}

export function readVerifyConfig(r: EnvReader): VerifyConfig {
  return {
    enabled: r.bool('VERIFY', d.enabled),
    share: r.fraction('VERIFY_SHARE', d.share),
    floor: r.fraction('VERIFY_FLOOR', d.floor),
    checkPrice: r.fraction('VERIFY_CHECK_PRICE', d.checkPrice),
    similarity: r.fraction('VERIFY_SIMILARITY', d.similarity),
    maxTokensPerSecond: r.int('VERIFY_MAX_TOKENS_PER_SECOND', d.maxTokensPerSecond, 0, 10_000_000),
    modelMaxTokensPerSecond: modelCaps(r),
    minTokensForSpeed: r.int('VERIFY_MIN_TOKENS', d.minTokensForSpeed, 0, 1_000_000),
    minWordsForReplay: r.int('VERIFY_MIN_WORDS', d.minWordsForReplay, 1, 1_000_000),
    strikesToSuspend: r.int('VERIFY_STRIKES', d.strikesToSuspend, 1, 1_000),
    failuresPerStrike: r.int('VERIFY_FAILURES', d.failuresPerStrike, 0, 1_000_000),
    probationAgreements: r.int('VERIFY_PROBATION_AGREEMENTS', d.probationAgreements, 1, 100_000),
    evidenceWindow: r.duration('VERIFY_EVIDENCE_WINDOW', d.evidenceWindow, 60, 365 * 86_400),
    probeInterval: r.duration('VERIFY_PROBE_INTERVAL', d.probeInterval, 1, 86_400, true),
    spotShare: r.fraction('VERIFY_SPOT_SHARE', d.spotShare),
    auditDelay: r.duration('VERIFY_AUDIT_DELAY', d.auditDelay, 0.001, 60, true),
  };
}
