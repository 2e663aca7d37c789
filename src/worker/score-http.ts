// Scoring calls over the backends' HTTP wires (scoring.ts says what a score is):
// - vLLM, in one prefill: POST /tokenize twice (the conversation with its assistant turn open,
//   to know where the answer starts; then with the answer as that turn, for its token ids),
//   then POST /v1/chat/completions with the answer as the final assistant message,
//   `continue_final_message: true, add_generation_prompt: false, max_tokens: 1,
//   prompt_logprobs: k`: vLLM lists at every prompt position the actual token (with its exact
//   rank in the vocabulary) and the top k (docs.vllm.ai, "prompt_logprobs"; vllm/logprobs.py).
// - Ollama ≥ 0.12.11: /api/chat with `logprobs: true, top_logprobs: k` gives logprobs of
//   generated tokens only: resync replay (scoring.ts), each generation greedy from the
//   audited answer's beginning as an open assistant turn.
import { call } from './backend.js';
import type { BackendJob } from './backend.js';
import { replay, TOP_K, type AnswerScore, type GeneratedToken, type PositionScore } from './scoring.js';

export const OLLAMA_LOGPROBS_SINCE = '0.12.11';
/** Positions scored at most (the cost a check puts on a node stays bounded: docs/verification.md). */
export const MAX_POSITIONS = 512;
/** Tokens one replay generation may run before it is compared. */
const REPLAY_STEP = 64;

const post = async (url: string, body: unknown, what: string): Promise<unknown> =>
  (await call(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }, what)).json();

type VllmLogprob = { logprob: number; rank?: number | null; decoded_token?: string | null };

export async function scoreVllm(url: string, job: BackendJob, answer: string): Promise<AnswerScore> {
  const open = (await post(`${url}/tokenize`, { model: job.model, messages: job.messages, add_generation_prompt: true }, 'vllm /tokenize')) as { count?: number; tokens?: number[] };
  const withAnswer = [...job.messages, { role: 'assistant', content: answer }];
  const all = (await post(`${url}/tokenize`, { model: job.model, messages: withAnswer, add_generation_prompt: false, continue_final_message: true }, 'vllm /tokenize')) as { tokens?: number[] };
  const start = open.count ?? open.tokens?.length ?? 0;
  const tokens = all.tokens ?? [];
  const body = (await post(`${url}/v1/chat/completions`, {
    model: job.model, messages: withAnswer, add_generation_prompt: false, continue_final_message: true,
    max_tokens: 1, temperature: 0, prompt_logprobs: TOP_K,
  }, 'vllm /v1/chat/completions')) as { prompt_logprobs?: (Record<string, VllmLogprob> | null)[] };
  const lists = body.prompt_logprobs ?? [];
  const positions: PositionScore[] = [];
  const end = Math.min(tokens.length, start + MAX_POSITIONS);
  for (let i = start; i < end; i++) {
    const entry = lists[i];
    const actual = entry?.[String(tokens[i])];
    if (!entry || !actual) continue;
    const byRank = Object.values(entry).sort((a, b) => b.logprob - a.logprob);
    const top = byRank[0]!;
    const second = byRank.find((e) => e !== top && (e.rank ?? 0) === 2) ?? byRank[1];
    positions.push({
      token: actual.decoded_token ?? '', logprob: actual.logprob, rank: actual.rank ?? TOP_K + 1,
      top: top.decoded_token ?? '', top_logprob: top.logprob, gap: second ? top.logprob - second.logprob : 1e3,
    });
  }
  return { method: 'prefill', positions, unscored: Math.max(0, tokens.length - end) };
}

export async function scoreOllama(url: string, job: BackendJob, answer: string): Promise<AnswerScore> {
  return replay(async (prefix) => {
    const messages = prefix ? [...job.messages, { role: 'assistant', content: prefix }] : job.messages;
    const options: Record<string, number> = { temperature: 0, num_predict: REPLAY_STEP };
    if (job.seed !== undefined) options.seed = job.seed;
    const body = (await post(`${url}/api/chat`, { model: job.model, messages, stream: false, logprobs: true, top_logprobs: TOP_K, options }, 'ollama /api/chat')) as { logprobs?: GeneratedToken[] };
    return body.logprobs ?? [];
  }, answer, MAX_POSITIONS);
}
