// What a worker's result becomes for the user: real workers send `{"message": "text"}` or
// `{"message": {"role", "content"}}`; users always read `{"message": {"role", "content"}}`.
// Usage (ours): `prompt_tokens` and `completion_tokens`, from the report's `usage` or
// `result.usage`, kept when they are whole numbers from 0 to MAX_TOKENS (what PostgreSQL's
// integer holds: the auditor computes with them).

export interface Answer { message: { role: string; content: string } }
export interface Usage { prompt_tokens?: number; completion_tokens?: number }

export function answerOf(result: Record<string, unknown>): Answer {
  const m = result.message;
  if (typeof m === 'string') return { message: { role: 'assistant', content: m } };
  if (typeof m === 'object' && m !== null && !Array.isArray(m)) {
    const { role, content } = m as { role?: unknown; content?: unknown };
    return { message: { role: typeof role === 'string' ? role : 'assistant', content: typeof content === 'string' ? content : '' } };
  }
  return { message: { role: 'assistant', content: '' } };
}

/** The most tokens a report may count (openapi.json UpdateResultRequest.usage). */
export const MAX_TOKENS = 2_147_483_647;

const count = (v: unknown): number | undefined => (typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= MAX_TOKENS ? v : undefined);

export function usageOf(...sources: unknown[]): Usage | null {
  for (const s of sources) {
    if (typeof s !== 'object' || s === null) continue;
    const u = s as Record<string, unknown>;
    const out: Usage = {};
    const prompt = count(u.prompt_tokens);
    const completion = count(u.completion_tokens);
    if (prompt !== undefined) out.prompt_tokens = prompt;
    if (completion !== undefined) out.completion_tokens = completion;
    if (prompt !== undefined || completion !== undefined) return out;
  }
  return null;
}
