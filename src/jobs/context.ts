// A job's length against a node's declared context (issue 53; docs/verification.md,
// "Request-error claims"). A node declares, with its models, the context length (tokens) each
// holds (update_models `limits`, src/routes/worker/update-models.ts; node_sessions.model_contexts,
// migrations/0032). The network cannot count a job's tokens (it has no tokenizer), so it bounds
// them by the request's size in UTF-8 bytes as stored (jobs.request_bytes, a generated column):
// - an upper bound, for judging: every token of a text stands for at least one of its bytes (a
//   byte-fallback vocabulary's worst case is one token per byte), and the JSON around each
//   message (`{"role": "user", "content": ""}`, some 30 bytes) outweighs what a chat template adds
//   for it. With the answer's room (max_output), that is the most the request can need. A
//   request error is a strike only when the refusing node's declaration held that much
//   (coversSql): a node that declared nothing, or less, may have refused it honestly.
// - an estimate, for dispatch: BYTES_PER_TOKEN bytes a token, as English text averages on the
//   common vocabularies. A job whose estimate exceeds a node's declared context is not given to
//   it (fitsSql, in the lease round and the hand-off), and one whose estimate exceeds every
//   online node's declared context is refused at submission (400). The estimate can be wrong
//   both ways: a node near its limit may be passed over for a job that would have fit, or given
//   one it must refuse — an honest refusal then, and not a strike, since the upper bound
//   exceeds its context.
// What a backend adds of its own (an Ollama Modelfile's system prompt) is the node's to take off
// the context it declares.

/** The estimate's bytes per token (dispatch only; judging uses one token per byte). */
export const BYTES_PER_TOKEN = 4;

/** A context length a node may declare, in tokens (larger ones are out of any model's reach and of a 32-bit column's). */
export const MAX_DECLARED_CONTEXT = 100_000_000;

/** A request's estimated prompt tokens, from its bytes as stored (the dispatch estimate). */
export const estimatedTokens = (requestBytes: number): number => Math.floor(requestBytes / BYTES_PER_TOKEN);

/**
 * SQL: whether job `j` (a jobs row: its request_bytes) may go to a session whose declared
 * context for its model is `ctx` (NULL or 0: none declared, so any job may).
 */
export const fitsSql = (ctx: string, j: string): string => `(coalesce(${ctx}, 0) <= 0 OR ${j}.request_bytes / ${BYTES_PER_TOKEN} <= ${ctx})`;

/**
 * SQL: whether a declared context `ctx` held the whole of job `j`'s request — its upper bound in
 * tokens (one per byte) and the answer's room it asked for (max_output) — so that the node's
 * refusal of it as too long is not believed. NULL or 0 (none declared): never.
 */
export const coversSql = (ctx: string, j: string): string =>
  `(coalesce(${ctx}, 0) > 0 AND ${j}.request_bytes + greatest(coalesce((${j}.request ->> 'max_output')::bigint, 0), 0) <= ${ctx})`;

/** A request longer than every online node of its model declared it can hold: refused at submission, nothing queued. */
export class ContextTooLong extends Error {
  constructor(
    readonly estimate: number,
    readonly longest: number,
  ) {
    super(
      `This request is about ${estimate} tokens long (estimated from its size: ${BYTES_PER_TOKEN} bytes a token), more than the ${longest}-token context of every node serving the model now. Shorten the messages.`,
    );
  }
}
