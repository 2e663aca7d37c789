// An answer's tokens on the wire (issue 53, docs/verification.md "Scoring the tokens a node
// generated"): a worker reports, with a plain text answer, the token sequence its model generated
// as `result.tokens` — each token its text as a string when its bytes are valid UTF-8 on their
// own, else the array of its byte values (0–255: a character split across tokens, a byte-fallback
// token). The coordinator takes them only when their bytes, in order, are exactly the UTF-8 bytes
// of the answer's text; a score check then forces exactly those tokens (src/worker/gguf.ts,
// score-http.ts) instead of re-tokenizing the text, which an honest model's own tokens often are
// not. Shared by the worker (which writes them) and the coordinator (which checks them).

/** One token: its text, or its bytes where they are not valid UTF-8 alone. */
export type WireToken = string | number[];

// fatal: invalid UTF-8 throws (it is not replaced); ignoreBOM: a leading U+FEFF is the token's own text.
const strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** A token's bytes in their wire form. */
export function wireToken(bytes: Uint8Array): WireToken {
  try {
    return strict.decode(bytes);
  } catch {
    return [...bytes];
  }
}

/** A well-formed wire token's bytes. */
export const tokenBytes = (t: WireToken): Buffer => (typeof t === 'string' ? Buffer.from(t, 'utf8') : Buffer.from(t));

/** Most tokens a report may carry (the body limit bounds them anyway: a token is at least one byte). */
export const MAX_ANSWER_TOKENS = 1_000_000;

/** A list of byte values (whole numbers 0 to 255), empty or not: a logprobs entry's `bytes` too (worker/backend.ts pieceOf). */
export const isByteValues = (v: unknown): v is number[] =>
  Array.isArray(v) && v.every((b) => typeof b === 'number' && Number.isInteger(b) && b >= 0 && b <= 255);

/** A well-formed wire token: a non-empty string, or a non-empty list of byte values. */
const isWireToken = (t: unknown): t is WireToken => (typeof t === 'string' && t.length > 0) || (isByteValues(t) && t.length > 0);

/**
 * `v` as the tokens of `text`, or why not: a list of non-empty tokens (strings, or arrays of byte
 * values) whose bytes, concatenated, are the UTF-8 bytes of `text`.
 */
export function answerTokensOf(v: unknown, text: string): { tokens: WireToken[] } | { error: string } {
  if (!Array.isArray(v)) return { error: 'result.tokens must be a list of tokens' };
  if (v.length > MAX_ANSWER_TOKENS) return { error: `result.tokens may list at most ${MAX_ANSWER_TOKENS} tokens` };
  const want = Buffer.from(text, 'utf8');
  let at = 0;
  for (const [i, t] of v.entries()) {
    if (!isWireToken(t)) {
      return { error: `result.tokens[${i}] is neither a non-empty string nor a non-empty list of byte values (whole numbers 0 to 255)` };
    }
    const bytes = tokenBytes(t);
    if (at + bytes.length > want.length || !bytes.equals(want.subarray(at, at + bytes.length))) {
      return {
        error: `result.tokens do not spell the answer's text: token ${i} differs from its bytes at byte ${at} (the tokens' bytes, concatenated, must be exactly the UTF-8 bytes of result.message's content)`,
      };
    }
    at += bytes.length;
  }
  if (at !== want.length) return { error: `result.tokens do not spell the answer's text: they end at byte ${at} of its ${want.length}` };
  return { tokens: v as WireToken[] };
}

/** `v` when it is a list of well-formed tokens (what a score check's params.score.tokens carry), else undefined. */
export function tokensOf(v: unknown): WireToken[] | undefined {
  if (!Array.isArray(v) || v.length > MAX_ANSWER_TOKENS) return undefined;
  return v.every(isWireToken) ? v : undefined;
}
