// Scoring an audited answer (issue 31, docs/verification.md "Token-level checks"): a checking
// node's backend says, at each position of the answer another node gave, how its own model
// ranks the token that answer has there. What each backend kind can do:
// - one pass over prompt + answer with the whole distribution at each place: the gguf backend
//   (gguf.ts) and vLLM (`prompt_logprobs`, score-vllm.ts);
// - "resync replay" where a backend gives logprobs of generated tokens only (Ollama ≥ 0.12.11,
//   llama.cpp's server): generate greedily from the audited prefix; where the generated token
//   differs from the answer's, record the answer's token's rank among the top-k (or "outside"),
//   force it by continuing from the longer prefix, and go on; capped (replay() below).
// The statistics over these positions are src/verify/token-stats.ts.

/** One position of the audited answer, as the checker's model sees it. */
export interface PositionScore {
  /** The audited token's text. */
  token: string;
  /** Its log-probability under the checker's model (for a token outside the top-k: at most the k-th's). */
  logprob: number;
  /** Its rank among the checker's next tokens, 1 = the checker's own choice; TOP_K + 1 = outside the top-k the backend gave. */
  rank: number;
  /** The checker's own choice there, and its log-probability. */
  top: string;
  top_logprob: number;
  /** The checker's confidence: its top-1's log-probability minus its top-2's. */
  gap: number;
}

export interface AnswerScore {
  /** prefill: every position from one pass; replay: generated from the audited prefix, positions read off the generation. */
  method: 'prefill' | 'replay';
  positions: PositionScore[];
  /** What the cap left unscored: tokens (prefill) or characters (replay). */
  unscored: number;
}

/** result.scores on the wire (score-job.ts): arrays aligned by position. */
export interface CompactScore {
  method: AnswerScore['method'];
  /** What the backend's cap left unscored (tokens or characters). */
  unscored: number;
  rank: number[];
  logprob: number[];
  top_logprob: number[];
  gap: number[];
}

/** How many alternatives a backend is asked for where it lists them (Ollama's and OpenAI's top_logprobs allow up to 20). */
export const TOP_K = 10;

/** The audited token's place in a full distribution (a Map sorted from the most likely down, as node-llama-cpp gives it). */
export function rankOf<T>(probs: Map<T, number>, token: T, text: (t: T) => string): PositionScore {
  let rank = 0;
  let i = 0;
  let top: T | undefined;
  let p1 = 0;
  let p2 = 0;
  for (const [t, p] of probs) {
    i++;
    if (i === 1) {
      top = t;
      p1 = p;
    }
    if (i === 2) p2 = p;
    if (t === token) rank = i;
    if (rank && i >= 2) break;
  }
  const p = probs.get(token) ?? 0;
  const log = (x: number) => Math.log(Math.max(x, 1e-30));
  return {
    token: text(token),
    logprob: log(p),
    rank: rank || probs.size + 1,
    top: top === undefined ? '' : text(top),
    top_logprob: log(p1),
    gap: log(p1) - log(p2),
  };
}

/** A generated token with the alternatives the backend listed (OpenAI's and Ollama's `logprobs` entries). */
export interface GeneratedToken {
  token: string;
  logprob: number;
  top_logprobs: { token: string; logprob: number }[];
}

/** Generates greedily after the audited answer's first `prefix` characters; the tokens with their alternatives. */
export type Generate = (prefix: string) => Promise<GeneratedToken[]>;

/**
 * Resync replay over `answer`: at most `maxPositions` positions and `maxCalls` generations.
 * Text, not token ids, is compared (these backends give token texts): where the generation
 * leaves the answer, the answer's token is the longest listed alternative the answer continues
 * with; none listed: it is outside the top-k, and the replay resyncs one character on.
 */
export async function replay(generate: Generate, answer: string, maxPositions = 256, maxCalls = 24): Promise<AnswerScore> {
  const positions: PositionScore[] = [];
  let at = 0;
  for (let calls = 0; at < answer.length && positions.length < maxPositions && calls < maxCalls; calls++) {
    const tokens = await generate(answer.slice(0, at));
    if (tokens.length === 0) break;
    for (const g of tokens) {
      if (at >= answer.length || positions.length >= maxPositions) break;
      const alts = [...g.top_logprobs].sort((a, b) => b.logprob - a.logprob);
      const top = alts[0] ?? { token: g.token, logprob: g.logprob };
      const gap = top.logprob - (alts[1]?.logprob ?? -Infinity);
      const rest = answer.slice(at);
      if (g.token.length > 0 && rest.startsWith(g.token)) {
        const rank = Math.max(1, alts.findIndex((a) => a.token === g.token) + 1);
        positions.push({ token: g.token, logprob: g.logprob, rank, top: top.token, top_logprob: top.logprob, gap: Math.min(gap, 1e3) });
        at += g.token.length;
        continue;
      }
      // The generation left the answer here: rank the answer's token, force it, generate again.
      let found = -1;
      alts.forEach((a, i) => {
        if (a.token.length > 0 && rest.startsWith(a.token) && (found < 0 || a.token.length > alts[found]!.token.length)) found = i;
      });
      if (found >= 0) {
        const a = alts[found]!;
        positions.push({ token: a.token, logprob: a.logprob, rank: found + 1, top: top.token, top_logprob: top.logprob, gap: Math.min(gap, 1e3) });
        at += a.token.length;
      } else {
        const last = alts.at(-1)?.logprob ?? g.logprob;
        positions.push({
          token: rest.slice(0, 1),
          logprob: last,
          rank: TOP_K + 1,
          top: top.token,
          top_logprob: top.logprob,
          gap: Math.min(gap, 1e3),
        });
        at += 1;
      }
      break;
    }
  }
  return { method: 'replay', positions, unscored: Math.max(0, answer.length - at) };
}
