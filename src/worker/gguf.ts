// A GGUF file run in the worker's own process by llama.cpp, through node-llama-cpp (its CPU
// build: `getLlama({gpu: false, build: "never"})` never builds or downloads anything): a node
// without Ollama or vLLM joins with `ins worker --backend gguf --model-file PATH --models NAME`
// (docs/worker.md). node-llama-cpp is loaded only when this backend is chosen; an install
// without it (the server's own, `npm ci --omit=dev`) gets a message saying how to add it.
// The prompt is the model's chat template as node-llama-cpp resolves it (the GGUF's own
// Jinja template, or the wrapper its architecture implies); usage counts real tokens.
// Continuing an answer: the prefix's tokens follow the open assistant turn, then generation
// goes on. Scoring an answer (score()): one pass over prompt + answer with the full next-token
// distribution at every answer position (LlamaContextSequence.controlledEvaluate).
// Issue 53: an answer's tokens are reported as the model generated them (result.tokens, each
// token's bytes from the GGUF's own vocabulary: vocabularyBytes), and a score check that
// carries the audited node's tokens scores exactly those, each mapped to this model's own token
// by its bytes, instead of re-tokenizing the text (docs/verification.md, "Scoring the tokens a
// node generated").
import type { ChatHistoryItem, Llama, LlamaContext, LlamaModel, Token } from 'node-llama-cpp';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { BackendError, type Backend, type BackendAnswer, type BackendJob, type ModelBuild } from './backend.js';
import { rankOf, type AnswerScore, type PositionScore } from './scoring.js';
import { tokenBytes, wireToken, type WireToken } from '../validation/answer-tokens.js';

export const NODE_LLAMA_CPP = 'node-llama-cpp@3.21.1';
/** Positions an answer is scored at, at most: a check's cost stays bounded (docs/verification.md). */
export const SCORE_MAX_POSITIONS = 512;

let runtime: Promise<Llama> | undefined;
/**
 * The process's one llama.cpp runtime, whatever the number of backends and other users on it:
 * each getLlama with options is a new one, with its own threads, until disposed. A failed start is tried again at the next call, as a failed model load is.
 */
export function llamaRuntime(): Promise<Llama> {
  runtime ??= import('node-llama-cpp')
    .then((lib) => lib.getLlama({ gpu: false, build: 'never', logLevel: lib.LlamaLogLevel.error }))
    .catch((err: unknown) => {
      runtime = undefined;
      throw err;
    });
  return runtime;
}

type Loaded = {
  model: LlamaModel;
  context: LlamaContext;
  chatWrapper: import('node-llama-cpp').ChatWrapper;
  fileTypes: Record<number, string>;
  vocab: Vocabulary | undefined;
};

/** Each token id's bytes (undefined: a control token, or none known), and the id of each byte string. */
export interface Vocabulary {
  bytes: (Buffer | undefined)[];
  ids: Map<string, Token>;
}

// GPT-2's byte-level BPE writes each byte as a printable character (bytes_to_unicode in its encoder.py).
const gpt2Bytes = (): Map<string, number> => {
  const printable = [
    ...Array.from({ length: 94 }, (_, i) => 33 + i),
    ...Array.from({ length: 12 }, (_, i) => 161 + i),
    ...Array.from({ length: 82 }, (_, i) => 174 + i),
  ];
  const map = new Map<string, number>();
  let n = 0;
  for (let b = 0; b < 256; b++) map.set(String.fromCodePoint(printable.includes(b) ? b : 256 + n++), b);
  return map;
};

/**
 * The vocabulary's bytes, from the GGUF's tokenizer.ggml.tokens and token_type: SentencePiece
 * ("llama": "▁" a space, `<0xNN>` byte tokens) and GPT-2's byte-level BPE ("gpt2"); another
 * tokenizer, or a file without its vocabulary: undefined (the backend reports no tokens, and
 * scores by re-tokenizing). Control, unknown and unused tokens have no bytes. Where two ids
 * spell the same bytes (a character and its byte token), the map keeps the normal token.
 */
export function vocabularyBytes(kind: unknown, tokens: unknown, types: unknown): Vocabulary | undefined {
  if (!Array.isArray(tokens) || (kind !== 'llama' && kind !== 'gpt2')) return undefined;
  const type = (i: number): number => (Array.isArray(types) && typeof types[i] === 'number' ? types[i] : 1);
  const g2 = kind === 'gpt2' ? gpt2Bytes() : undefined;
  const bytes = tokens.map((t: unknown, i): Buffer | undefined => {
    if (typeof t !== 'string' || [2, 3, 5].includes(type(i))) return undefined;
    if (g2) {
      if (type(i) === 4) return Buffer.from(t, 'utf8'); // a user-defined token is its text
      const out = [...t].map((c) => g2.get(c));
      return out.every((b) => b !== undefined) ? Buffer.from(out) : Buffer.from(t, 'utf8');
    }
    const byte = type(i) === 6 ? /^<0x([0-9A-Fa-f]{2})>$/.exec(t) : null;
    return byte ? Buffer.from([parseInt(byte[1]!, 16)]) : Buffer.from(t.replaceAll('▁', ' '), 'utf8');
  });
  const ids = new Map<string, Token>();
  bytes.forEach((b, i) => {
    if (!b || b.length === 0) return;
    const key = b.toString('latin1');
    if (!ids.has(key) || type(ids.get(key)!) === 6) ids.set(key, i as Token);
  });
  return { bytes, ids };
}

export class Gguf implements Backend {
  name: string;
  readonly continues: boolean;
  readonly scores = 'prefill' as const;
  private loaded: Promise<Loaded> | undefined;
  private digest: Promise<string | undefined> | undefined;

  /** threads: llama.cpp's CPU threads (undefined: node-llama-cpp's default, every core; busy-waiting threads on a shared machine slow everything). */
  constructor(
    private readonly file: string,
    private readonly modelName: string,
    mayContinue: boolean,
    private readonly sequences = 1,
    private readonly threads?: number,
  ) {
    this.name = `GGUF ${file} (llama.cpp on the CPU)`;
    this.continues = mayContinue;
  }

  private load(): Promise<Loaded> {
    this.loaded ??= (async () => {
      let lib: typeof import('node-llama-cpp');
      try {
        lib = await import('node-llama-cpp');
      } catch (err) {
        throw new BackendError(
          `--backend gguf needs ${NODE_LLAMA_CPP}, which this install lacks (${(err as Error).message.split('\n')[0]}): run \`npm install ${NODE_LLAMA_CPP}\` where ins is installed`,
        );
      }
      const llama = await llamaRuntime();
      let model: LlamaModel;
      try {
        model = await llama.loadModel({ modelPath: this.file });
      } catch (err) {
        throw new BackendError(`cannot load ${this.file}: ${(err as Error).message}`);
      }
      const context = await model.createContext({
        sequences: this.sequences,
        contextSize: { max: 4096 },
        ...(this.threads ? { threads: this.threads } : {}),
      });
      const tokenizer = (model.fileInfo.metadata as { tokenizer?: { ggml?: { model?: unknown; tokens?: unknown; token_type?: unknown } } }).tokenizer
        ?.ggml;
      const vocab = vocabularyBytes(tokenizer?.model, tokenizer?.tokens, tokenizer?.token_type);
      return { model, context, chatWrapper: lib.resolveChatWrapper(model), fileTypes: lib.GgufFileType as unknown as Record<number, string>, vocab };
    })();
    // A failed load is tried again at the next call (the file may appear).
    this.loaded.catch(() => {
      this.loaded = undefined;
    });
    return this.loaded;
  }

  /** Loads the model: a file that is missing or not a model fails the worker's start, clearly. */
  async detect(): Promise<void> {
    await this.load();
  }

  models(): Promise<string[]> {
    return Promise.resolve([this.modelName]);
  }

  /**
   * Issue 31: the file's sha256 (read once, on the first declaration: a few seconds per GB) and
   * its GGUF file type as llama.cpp names it (general.file_type, e.g. MOSTLY_Q4_K_M → Q4_K_M).
   */
  async builds(models: string[]): Promise<Record<string, ModelBuild>> {
    this.digest ??= sha256Of(this.file).catch(() => undefined);
    const digest = await this.digest;
    let quantization: string | undefined;
    try {
      const l = await this.load();
      const type = l.model.fileInfo.metadata.general?.file_type;
      const name = type === undefined ? undefined : l.fileTypes[type];
      quantization = name?.replace(/^(MOSTLY|ALL)_/, '');
    } catch {
      // Not loaded: no quantisation to say.
    }
    const build: ModelBuild = { ...(digest ? { digest } : {}), ...(quantization ? { quantization } : {}) };
    return Object.fromEntries(models.filter((m) => m === this.modelName && (build.digest || build.quantization)).map((m) => [m, build]));
  }

  /** Issue 53: the context the worker loaded the model with (its trained length, at most 4,096 tokens): a longer prompt it refuses (chat()). */
  async contextLengths(models: string[]): Promise<Record<string, number>> {
    try {
      const l = await this.load();
      return Object.fromEntries(models.filter((m) => m === this.modelName).map((m) => [m, l.context.contextSize]));
    } catch {
      return {};
    }
  }

  /** Plain chat only for now: the OpenAI fields beyond it (issue 28) are not passed to llama.cpp here, so none is declared. */
  capabilities(): Promise<string[]> {
    return Promise.resolve([]);
  }

  // Never called: the backend declares neither `completions` nor `embeddings`, so the
  // coordinator leases it no such job (jobs/sql/lease.ts).
  complete(): Promise<BackendAnswer> {
    return Promise.reject(new BackendError('the gguf backend runs chat jobs only'));
  }

  embed(): Promise<BackendAnswer> {
    return Promise.reject(new BackendError('the gguf backend does not embed'));
  }

  /** The prompt's tokens: the conversation through the model's template, its assistant turn left open. */
  private prompt(l: Loaded, messages: BackendJob['messages']): Token[] {
    const history: ChatHistoryItem[] = messages.map((m) =>
      m.role === 'assistant'
        ? { type: 'model', response: [m.content] }
        : m.role === 'system'
          ? { type: 'system', text: m.content }
          : { type: 'user', text: m.content },
    );
    history.push({ type: 'model', response: [] });
    return l.chatWrapper.generateContextState({ chatHistory: history }).contextText.tokenize(l.model.tokenizer);
  }

  async chat(job: BackendJob, onDelta?: (delta: string) => void, signal?: AbortSignal): Promise<BackendAnswer> {
    const l = await this.load();
    const prompt = this.prompt(l, job.messages);
    const prefix = job.prefix ? l.model.tokenize(job.prefix, false) : [];
    const room = l.context.contextSize - prompt.length - prefix.length;
    // Worded so that requestErrorOf (backend.ts) codes it context_length_exceeded, as the other backends' are.
    if (room <= 0)
      throw new BackendError(
        `gguf: the prompt (${prompt.length + prefix.length} tokens) exceeds the model's context length (${l.context.contextSize} tokens)`,
        400,
      );
    const max = job.max_output > 0 ? Math.min(job.max_output, room) : room;
    const seq = l.context.getSequence();
    const out: Token[] = [];
    let sent = '';
    // The backend's own reason to stop, as Ollama's done_reason is: a continued answer's count is
    // the continuation's alone, so the service cannot tell "length" from it (an outside probe).
    let finish: 'stop' | 'length' = 'stop';
    try {
      const options = job.temperature > 0 ? { temperature: job.temperature, seed: job.seed ?? 0 } : { temperature: 0 };
      for await (const token of seq.evaluate([...prompt, ...prefix], options)) {
        if (signal?.aborted) throw new BackendError('gguf: aborted');
        if (l.model.isEogToken(token)) break;
        out.push(token);
        if (onDelta) {
          // A character split over byte tokens is sent once it is whole.
          const text = l.model.detokenize(out);
          if (!text.endsWith('\uFFFD') && text.length > sent.length) {
            onDelta(text.slice(sent.length));
            sent = text;
          }
        }
        if (out.length >= max) {
          finish = 'length';
          break;
        }
      }
    } finally {
      await seq.dispose();
    }
    const content = l.model.detokenize(out);
    if (onDelta && content.length > sent.length) onDelta(content.slice(sent.length));
    const tokens = generatedTokens(l.vocab, out, content);
    return {
      content,
      usage: { prompt_tokens: prompt.length + prefix.length, completion_tokens: out.length },
      finish_reason: finish,
      ...(tokens ? { tokens } : {}),
    };
  }

  /**
   * The audited answer scored in one pass: the prompt as the job's request makes it, then the
   * answer's tokens, each with the distribution the model gives at its place (raw logits, no
   * sampling settings: the distribution, not a draw from it).
   */
  async score(job: BackendJob, answer: string, reported?: WireToken[]): Promise<AnswerScore> {
    const l = await this.load();
    const prompt = this.prompt(l, job.messages);
    // Reported tokens beyond the cap are not even mapped (each maps to one id or more).
    const head = reported && l.vocab ? reported.slice(0, SCORE_MAX_POSITIONS) : undefined;
    const all = head ? forcedIds(l, head) : l.model.tokenize(answer, false);
    const beyond = head ? reported!.length - head.length : 0;
    const tokens = all.slice(0, Math.max(0, Math.min(SCORE_MAX_POSITIONS, l.context.contextSize - prompt.length - 1)));
    const seq = l.context.getSequence();
    try {
      const input = [...prompt, ...tokens];
      // The distribution at input i is the next token's, i.e. answer position i - prompt.length + 1.
      const first = prompt.length - 1;
      const results = await seq.controlledEvaluate(
        input.map((t, i) => (i >= first && i < first + tokens.length ? [t, { generateNext: { probabilities: true } }] : t)),
      );
      const positions: PositionScore[] = tokens.map((token, k) => {
        const probs = results[first + k]?.next.probabilities;
        if (!probs) throw new BackendError('gguf: no distribution at an answer position');
        return rankOf(probs, token, (t) => l.model.detokenize([t]));
      });
      return { method: 'prefill', positions, unscored: all.length - tokens.length + beyond };
    } finally {
      await seq.dispose();
    }
  }
}

/**
 * The generated ids as wire tokens, when their bytes spell `content` exactly (a token llama.cpp
 * decoded otherwise, a stripped space: none are reported rather than tokens the coordinator refuses).
 */
function generatedTokens(vocab: Vocabulary | undefined, ids: readonly Token[], content: string): WireToken[] | undefined {
  if (!vocab || ids.length === 0) return undefined;
  const pieces = ids.map((id) => vocab.bytes[id]);
  if (pieces.some((b) => !b || b.length === 0)) return undefined;
  return Buffer.concat(pieces as Buffer[]).equals(Buffer.from(content, 'utf8')) ? pieces.map((b) => wireToken(b!)) : undefined;
}

/**
 * The reported tokens as this model's ids, each by its bytes. A token this vocabulary lacks (the
 * audited node ran another tokenizer) is evidence, not an error: its bytes are scored as this
 * model's own tokenization of them (each byte its byte token where they are not UTF-8 alone), so
 * the positions stay the text the node wrote; the foreign token's split is then ranked as this
 * model ranks it, which a node of another vocabulary will mostly fail.
 */
function forcedIds(l: Loaded, reported: readonly WireToken[]): Token[] {
  const vocab = l.vocab!;
  return reported.flatMap((t) => {
    const bytes = tokenBytes(t);
    const id = vocab.ids.get(bytes.toString('latin1'));
    if (id !== undefined) return [id];
    if (typeof t === 'string') return l.model.tokenize(t, false);
    return [...bytes].flatMap((b) => {
      const byte = vocab.ids.get(String.fromCharCode(b));
      return byte === undefined ? [] : [byte];
    });
  });
}

/** The file's sha256, as `sha256:<hex>`. */
async function sha256Of(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return `sha256:${hash.digest('hex')}`;
}
