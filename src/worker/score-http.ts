// Scoring calls over the backends' HTTP wires (scoring.ts says what a score is):
// - vLLM, in one prefill: POST /tokenize twice (the conversation with its assistant turn open,
//   to know where the answer starts; then with the answer as that turn, for its token ids),
//   then POST /v1/chat/completions with the answer as the final assistant message,
//   `continue_final_message: true, add_generation_prompt: false, max_tokens: 1,
//   prompt_logprobs: k`: vLLM lists at every prompt position the actual token (with its exact
//   rank in the vocabulary) and the top k (docs.vllm.ai, "prompt_logprobs"; vllm/logprobs.py).
//   Issue 53, with the audited node's tokens: the answer is not re-tokenized. Each distinct
//   token's id comes from POST /tokenize of its text alone (`prompt`, `add_special_tokens:
//   false`); a token the tokenizer splits (one this vocabulary lacks, or that its tokenizer
//   writes otherwise alone) is scored as those pieces, as the gguf backend does; tokens that
//   are bytes of a character split across them are tokenized together. Then POST
//   /v1/completions with `prompt` as the token ids (the conversation with its assistant turn
//   open, from /tokenize, then the answer's), `max_tokens: 1, prompt_logprobs: k`: vLLM scores
//   exactly those ids (a prompt of token ids is taken as it is).
// - Ollama ≥ 0.12.11: /api/chat with `logprobs: true, top_logprobs: k` gives logprobs of
//   generated tokens only: resync replay (scoring.ts), each generation greedy from the
//   audited answer's beginning as an open assistant turn.
import { call } from './backend.js';
import type { BackendJob } from './backend.js';
import { replay, TOP_K, type AnswerScore, type GeneratedToken, type PositionScore } from './scoring.js';
import { tokenBytes, type WireToken } from '../validation/answer-tokens.js';

export const OLLAMA_LOGPROBS_SINCE = '0.12.11';
/** Positions scored at most (the cost a check puts on a node stays bounded: docs/verification.md). */
export const MAX_POSITIONS = 512;
/** Tokens one replay generation may run before it is compared. */
const REPLAY_STEP = 64;

const post = async (url: string, body: unknown, what: string): Promise<unknown> =>
  (await call(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }, what)).json();

type VllmLogprob = { logprob: number; rank?: number | null; decoded_token?: string | null };

export async function scoreVllm(url: string, job: BackendJob, answer: string, reported?: WireToken[]): Promise<AnswerScore> {
  const open = (await post(`${url}/tokenize`, { model: job.model, messages: job.messages, add_generation_prompt: true }, 'vllm /tokenize')) as {
    count?: number;
    tokens?: number[];
  };
  if (reported?.length && Array.isArray(open.tokens)) return scoreVllmTokens(url, job, open.tokens, reported);
  const withAnswer = [...job.messages, { role: 'assistant', content: answer }];
  const all = (await post(
    `${url}/tokenize`,
    { model: job.model, messages: withAnswer, add_generation_prompt: false, continue_final_message: true },
    'vllm /tokenize',
  )) as { tokens?: number[] };
  const start = open.count ?? open.tokens?.length ?? 0;
  const tokens = all.tokens ?? [];
  const body = (await post(
    `${url}/v1/chat/completions`,
    {
      model: job.model,
      messages: withAnswer,
      add_generation_prompt: false,
      continue_final_message: true,
      max_tokens: 1,
      temperature: 0,
      prompt_logprobs: TOP_K,
    },
    'vllm /v1/chat/completions',
  )) as { prompt_logprobs?: (Record<string, VllmLogprob> | null)[] };
  const end = Math.min(tokens.length, start + MAX_POSITIONS);
  const positions = positionsOf(body.prompt_logprobs ?? [], tokens, start, end);
  return { method: 'prefill', positions, unscored: Math.max(0, tokens.length - end) };
}

/** The ids of `text` alone, by vLLM's tokenizer. */
const idsOf = async (url: string, model: string, text: string): Promise<number[]> =>
  ((await post(`${url}/tokenize`, { model, prompt: text, add_special_tokens: false }, 'vllm /tokenize')) as { tokens?: number[] }).tokens ?? [];

/** The reported tokens as vLLM's ids: each distinct text tokenized once; consecutive byte tokens together. */
async function forcedIds(url: string, model: string, reported: readonly WireToken[]): Promise<number[]> {
  // Texts to tokenize: each string token; a run of byte tokens as the text their bytes make.
  const texts: string[] = [];
  for (let i = 0; i < reported.length; i++) {
    const t = reported[i]!;
    if (typeof t === 'string') {
      texts.push(t);
      continue;
    }
    const run: Buffer[] = [];
    while (i < reported.length && typeof reported[i] !== 'string') run.push(tokenBytes(reported[i++]!));
    i--;
    texts.push(Buffer.concat(run).toString('utf8'));
  }
  const known = new Map<string, number[]>();
  for (const text of new Set(texts)) known.set(text, await idsOf(url, model, text));
  return texts.flatMap((t) => known.get(t)!);
}

/** One prefill over the open conversation's ids and the reported tokens' ids (POST /v1/completions with a prompt of ids). */
async function scoreVllmTokens(url: string, job: BackendJob, open: number[], reported: readonly WireToken[]): Promise<AnswerScore> {
  // Tokens beyond the cap are not even asked about: at most MAX_POSITIONS /tokenize calls.
  const all = await forcedIds(url, job.model, reported.slice(0, MAX_POSITIONS));
  const ids = all.slice(0, MAX_POSITIONS);
  const body = (await post(
    `${url}/v1/completions`,
    {
      model: job.model,
      prompt: [...open, ...ids],
      max_tokens: 1,
      temperature: 0,
      prompt_logprobs: TOP_K,
    },
    'vllm /v1/completions',
  )) as { choices?: { prompt_logprobs?: (Record<string, VllmLogprob> | null)[] }[]; prompt_logprobs?: (Record<string, VllmLogprob> | null)[] };
  // vLLM puts a completion's prompt_logprobs in its choice (a chat completion's at the top).
  const lists = body.choices?.[0]?.prompt_logprobs ?? body.prompt_logprobs ?? [];
  const positions = positionsOf(lists, [...open, ...ids], open.length, open.length + ids.length);
  return { method: 'prefill', positions, unscored: all.length - ids.length + Math.max(0, reported.length - MAX_POSITIONS) };
}

/** Each scored position's rank, log-probability and the top's, from vLLM's prompt_logprobs lists for tokens[from, to). */
function positionsOf(
  lists: readonly (Record<string, VllmLogprob> | null | undefined)[],
  tokens: readonly number[],
  from: number,
  to: number,
): PositionScore[] {
  const positions: PositionScore[] = [];
  for (let i = from; i < to; i++) {
    const entry = lists[i];
    const actual = entry?.[String(tokens[i])];
    if (!entry || !actual) continue;
    const byRank = Object.values(entry).sort((a, b) => b.logprob - a.logprob);
    const top = byRank[0]!;
    const second = byRank.find((e) => e !== top && (e.rank ?? 0) === 2) ?? byRank[1];
    positions.push({
      token: actual.decoded_token ?? '',
      logprob: actual.logprob,
      rank: actual.rank ?? TOP_K + 1,
      top: top.decoded_token ?? '',
      top_logprob: top.logprob,
      gap: second ? top.logprob - second.logprob : 1e3,
    });
  }
  return positions;
}

export async function scoreOllama(url: string, job: BackendJob, answer: string): Promise<AnswerScore> {
  return replay(
    async (prefix) => {
      const messages = prefix ? [...job.messages, { role: 'assistant', content: prefix }] : job.messages;
      const options: Record<string, number> = { temperature: 0, num_predict: REPLAY_STEP };
      if (job.seed !== undefined) options.seed = job.seed;
      const body = (await post(
        `${url}/api/chat`,
        { model: job.model, messages, stream: false, logprobs: true, top_logprobs: TOP_K, options },
        'ollama /api/chat',
      )) as { logprobs?: GeneratedToken[] };
      return body.logprobs ?? [];
    },
    answer,
    MAX_POSITIONS,
  );
}
