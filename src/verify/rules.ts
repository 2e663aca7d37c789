// The rules the auditor applies, as pure functions (tested alone in test/verify-text.test.ts):
// when two answers agree, who the majority contradicts, how many tokens an answer has, and
// whether its speed is plausible.
import { words } from './text.js';
import { compare, type AnswerKind, type AnswerParts } from './compare.js';

export { agreeing } from './compare.js';

export interface RuleConfig {
  /** Two answers agree at this word-set similarity or above. */
  similarity: number;
  /** Output tokens per second of lease time above which an answer is implausible (0: off). */
  maxTokensPerSecond: number;
  /** Per-model caps that replace maxTokensPerSecond. */
  modelMaxTokensPerSecond: Record<string, number>;
  /** Answers with fewer tokens than this are not judged for speed. */
  minTokensForSpeed: number;
}

/**
 * An answer's output tokens: the node's own count, but never fewer than one per 6 characters
 * of the answer (English runs about 4), so that under-reporting cannot hide speed.
 */
export const outputTokens = (content: string, reported: number | null): number => Math.max(reported ?? 0, Math.ceil(content.length / 6));

/** Tokens per second when they exceed the model's cap, else undefined. */
export function tooFast(model: string, tokens: number, leaseSeconds: number | null, c: RuleConfig): { rate: number; cap: number } | undefined {
  const cap = c.modelMaxTokensPerSecond[model] ?? c.maxTokensPerSecond;
  if (cap <= 0 || leaseSeconds === null || tokens < c.minTokensForSpeed) return undefined;
  const rate = tokens / Math.max(leaseSeconds, 0.001);
  return rate > cap ? { rate, cap } : undefined;
}

/** An answer the verdict weighs: its text, and its tool calls or vectors when it has them (compare.ts). */
export interface Answered extends AnswerParts {
  id: string;
  nodeId: number;
}

/**
 * The verdict on a job's answers (the original first, then its copies, in order), each pair
 * compared by the kind of answer the job asks for (compare.ts; plain text when not given):
 * - two that agree: `agree`;
 * - two that disagree: `third` (another node decides, unless the first copied an earlier answer);
 * - three: the one both others agree on against it is `odd`; otherwise no majority (`none`).
 */
export type Verdict =
  | { kind: 'agree'; members: Answered[] }
  | { kind: 'third' }
  | { kind: 'odd'; odd: Answered; majority: Answered[]; similarity: number }
  | { kind: 'none' };

export function verdict(answers: Answered[], threshold: number, kind: AnswerKind = { kind: 'text' }): Verdict {
  const same = (x: Answered, y: Answered) => compare(x, y, kind, threshold).same;
  if (answers.length === 2) return same(answers[0]!, answers[1]!) ? { kind: 'agree', members: answers } : { kind: 'third' };
  if (answers.length !== 3) return { kind: 'none' };
  for (const [i, odd] of answers.entries()) {
    const others = answers.filter((_, j) => j !== i);
    if (same(others[0]!, others[1]!) && !same(odd, others[0]!) && !same(odd, others[1]!)) {
      return { kind: 'odd', odd, majority: others, similarity: Math.max(...others.map((o) => compare(odd, o, kind, threshold).score)) };
    }
  }
  // The third agrees with both, or with neither: nobody is contradicted by a majority.
  return { kind: 'none' };
}

/** Words an answer has (replay checks skip short answers: they repeat honestly). */
export const wordCount = (content: string): number => words(content).length;
