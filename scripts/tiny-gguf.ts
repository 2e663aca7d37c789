// A tiny llama-architecture GGUF with random weights from a seed, for tests and for trying
// `ins worker --backend gguf` (docs/worker.md): nothing comes from a model hub. 2 layers,
// hidden 64, a character-level SentencePiece ("llama") vocabulary of 354 tokens, F32 weights:
// about 600 KB, byte for byte the same for the same options.
//
// The vocabulary is one token per printable ASCII character (space as "▁"), the three control
// tokens and the 256 byte-fallback tokens: every text has one tokenization, so an answer the
// model generated tokenizes back to the very tokens it generated (docs/verification.md says why
// the token-level checks need that, and what a real vocabulary changes). The output rows of the
// byte tokens, <unk> and <s> are zero, so the model writes printable text.
//
// `vocab: 'wordpiece'` (issue 53): the same characters and byte tokens, plus every piece of
// WORDPIECE_WORDS and every prefix of them after "▁" (a space), as tokens of their own — as in real
// SentencePiece and BPE vocabularies, one text has many tokenizations ("▁river" is one token,
// or "▁ri" + "ver"… ), and a model's generated tokens are often not the tokenizer's own split of
// their text (measured in test/tiny-gguf.test.ts; docs/verification.md states the share).
//
// Two models with different seeds share the vocabulary and nothing else (an honest model and an
// impostor); `noise` adds N(0, noise²·σ²) to every weight of the seed's model (a heavier
// quantisation of the same model).
//
//   npx tsx scripts/tiny-gguf.ts OUT.gguf [--seed N] [--noise X] [--vocab chars|wordpiece]
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

export interface TinyModelOptions {
  seed: number;
  /** Relative noise on every weight (0: the seed's model exactly). */
  noise?: number;
  /** Written into general.name. */
  name?: string;
  /** chars (the default): one token per character; wordpiece: also every prefix of WORDPIECE_WORDS. */
  vocab?: TinyVocab;
}

export type TinyVocab = 'chars' | 'wordpiece';

export const TINY = { embd: 64, layers: 2, heads: 4, ff: 128, context: 1024 } as const;

const CONTROL = ['<unk>', '<s>', '</s>'];
const BYTES = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
const CHARS = ['▁', ...Array.from({ length: 0x7e - 0x21 + 1 }, (_, i) => String.fromCharCode(0x21 + i))];
export const TINY_VOCAB: readonly string[] = [...CONTROL, ...BYTES, ...CHARS];
const FIRST_CHAR = CONTROL.length + BYTES.length;

/** The words whose every piece of two characters or more, and every prefix after "▁", the word-piece vocabulary holds. */
export const WORDPIECE_WORDS: readonly string[] = [
  'the',
  'river',
  'stone',
  'bridge',
  'tell',
  'about',
  'old',
  'city',
  'light',
  'write',
  'poem',
  'explain',
  'numbers',
  'Paris',
  'cold',
  'sea',
  'there',
  'then',
  'other',
  'into',
  'over',
  'after',
  'water',
  'winter',
  'story',
  'start',
  'strong',
  'string',
  'person',
  'answer',
  'another',
  'under',
  'understand',
  'ring',
  'ing',
  'tion',
  'ation',
  'er',
  'es',
  'ed',
  'in',
  'on',
  'an',
  'at',
];
const pieces = (): string[] => {
  const seen = new Set(CHARS);
  const out: string[] = [];
  const add = (p: string) => {
    if (!seen.has(p)) {
      seen.add(p);
      out.push(p);
    }
  };
  for (const w of WORDPIECE_WORDS) {
    const c = [...w];
    // Every piece of the word (so "ri" + "ver" is "river" too), and every prefix after a space.
    for (let a = 0; a < c.length; a++) for (let b = a + 2; b <= c.length; b++) add(c.slice(a, b).join(''));
    for (let n = 1; n <= c.length; n++) add(`▁${c.slice(0, n).join('')}`);
  }
  return out;
};
/** The word-piece vocabulary: TINY_VOCAB's tokens first (same ids), then the pieces. */
export const WORDPIECE_VOCAB: readonly string[] = [...TINY_VOCAB, ...pieces()];
export const vocabOf = (v: TinyVocab | undefined): readonly string[] => (v === 'wordpiece' ? WORDPIECE_VOCAB : TINY_VOCAB);
const EOS = 2;

/** mulberry32: a small seeded generator; the same seed gives the same weights everywhere (tests use it for their seeded data too). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function gaussian(next: () => number): () => number {
  return () => {
    const u = Math.max(next(), 1e-12);
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * next());
  };
}

interface Tensor {
  name: string;
  dims: number[];
  data: Float32Array;
}

function tensors(opts: TinyModelOptions): Tensor[] {
  const g = gaussian(rng(opts.seed));
  // The noise has its own stream, so the noised copy keeps every weight of the seed's model.
  const n = gaussian(rng(opts.seed ^ 0x5eed5eed));
  const noise = opts.noise ?? 0;
  const { embd, layers, ff } = TINY;
  const vocab = vocabOf(opts.vocab).length;
  const random = (name: string, dims: number[], std: number, rowZero?: (row: number) => boolean): Tensor => {
    const size = dims.reduce((a, b) => a * b, 1);
    const data = new Float32Array(size);
    for (let i = 0; i < size; i++) {
      const w = g() * std;
      const row = Math.floor(i / dims[0]!);
      data[i] = rowZero?.(row) ? 0 : w + (noise > 0 ? n() * std * noise : 0);
    }
    return { name, dims, data };
  };
  const ones = (name: string, len: number): Tensor => ({ name, dims: [len], data: new Float32Array(len).fill(1) });
  // Large output weights make the next-token distribution peaked, like a trained model's
  // (a flat one would make every check a coin toss).
  const out: Tensor[] = [
    random('token_embd.weight', [embd, vocab], 1),
    ones('output_norm.weight', embd),
    random('output.weight', [embd, vocab], 0.6, (row) => row < FIRST_CHAR && row !== EOS),
  ];
  const w = 1 / Math.sqrt(embd);
  for (let l = 0; l < layers; l++) {
    out.push(
      ones(`blk.${l}.attn_norm.weight`, embd),
      random(`blk.${l}.attn_q.weight`, [embd, embd], w),
      random(`blk.${l}.attn_k.weight`, [embd, embd], w),
      random(`blk.${l}.attn_v.weight`, [embd, embd], w),
      random(`blk.${l}.attn_output.weight`, [embd, embd], w),
      ones(`blk.${l}.ffn_norm.weight`, embd),
      random(`blk.${l}.ffn_gate.weight`, [embd, ff], w),
      random(`blk.${l}.ffn_up.weight`, [embd, ff], w),
      random(`blk.${l}.ffn_down.weight`, [ff, embd], 1 / Math.sqrt(ff)),
    );
  }
  return out;
}

// GGUF v3 (ggml's gguf.md): header, metadata, tensor infos, then the data aligned to 32 bytes.
const T = { u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9 } as const;
const ALIGN = 32;

class Out {
  private parts: Buffer[] = [];
  size = 0;
  push(b: Buffer): void {
    this.parts.push(b);
    this.size += b.length;
  }
  u32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.push(b);
  }
  i32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v);
    this.push(b);
  }
  u64(v: number): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }
  f32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeFloatLE(v);
    this.push(b);
  }
  str(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.push(b);
  }
  pad(): void {
    const p = (ALIGN - (this.size % ALIGN)) % ALIGN;
    if (p) this.push(Buffer.alloc(p));
  }
  bytes(): Buffer {
    return Buffer.concat(this.parts);
  }
}

type Meta =
  | [key: string, type: 'u32' | 'f32' | 'bool' | 'string', value: number | string | boolean]
  | [key: string, type: 'array', value: { of: 'string' | 'f32' | 'i32'; items: (string | number)[] }];

export function tinyGguf(opts: TinyModelOptions): Buffer {
  const { embd, layers, heads, ff, context } = TINY;
  const VOCAB = vocabOf(opts.vocab);
  const meta: Meta[] = [
    ['general.architecture', 'string', 'llama'],
    ['general.name', 'string', opts.name ?? `tiny-${opts.vocab === 'wordpiece' ? 'wp-' : ''}${opts.seed}${opts.noise ? `-noise${opts.noise}` : ''}`],
    ['general.alignment', 'u32', ALIGN],
    ['llama.context_length', 'u32', context],
    ['llama.embedding_length', 'u32', embd],
    ['llama.block_count', 'u32', layers],
    ['llama.feed_forward_length', 'u32', ff],
    ['llama.attention.head_count', 'u32', heads],
    ['llama.attention.head_count_kv', 'u32', heads],
    ['llama.rope.dimension_count', 'u32', embd / heads],
    ['llama.attention.layer_norm_rms_epsilon', 'f32', 1e-5],
    ['llama.vocab_size', 'u32', VOCAB.length],
    ['tokenizer.ggml.model', 'string', 'llama'],
    ['tokenizer.ggml.tokens', 'array', { of: 'string', items: [...VOCAB] }],
    // SentencePiece merges the adjacent pair whose piece scores highest first: a longer piece scores higher.
    [
      'tokenizer.ggml.scores',
      'array',
      { of: 'f32', items: VOCAB.map((p, i) => (i < FIRST_CHAR ? 0 : i < TINY_VOCAB.length ? -i : [...p].length * 1000 - i)) },
    ],
    ['tokenizer.ggml.token_type', 'array', { of: 'i32', items: VOCAB.map((_, i) => (i === 0 ? 2 : i < 3 ? 3 : i < FIRST_CHAR ? 6 : 1)) }],
    ['tokenizer.ggml.unknown_token_id', 'u32', 0],
    ['tokenizer.ggml.bos_token_id', 'u32', 1],
    ['tokenizer.ggml.eos_token_id', 'u32', EOS],
    ['tokenizer.ggml.add_bos_token', 'bool', true],
    ['tokenizer.ggml.add_space_prefix', 'bool', false],
  ];
  const ts = tensors(opts);
  const o = new Out();
  o.push(Buffer.from('GGUF', 'ascii'));
  o.u32(3);
  o.u64(ts.length);
  o.u64(meta.length);
  for (const [key, type, value] of meta) {
    o.str(key);
    o.u32(T[type]);
    if (type === 'array') {
      const { of, items } = value;
      o.u32(T[of]);
      o.u64(items.length);
      for (const it of items) {
        if (of === 'string') o.str(it as string);
        else if (of === 'f32') o.f32(it as number);
        else o.i32(it as number);
      }
    } else if (type === 'string') o.str(value as string);
    else if (type === 'u32') o.u32(value as number);
    else if (type === 'f32') o.f32(value as number);
    else o.push(Buffer.from([value ? 1 : 0]));
  }
  let offset = 0;
  for (const t of ts) {
    o.str(t.name);
    o.u32(t.dims.length);
    for (const d of t.dims) o.u64(d);
    o.u32(0); // GGML_TYPE_F32
    o.u64(offset);
    offset += Math.ceil(t.data.byteLength / ALIGN) * ALIGN;
  }
  o.pad();
  for (const t of ts) {
    o.push(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    o.pad();
  }
  return o.bytes();
}

export function writeTinyGguf(path: string, opts: TinyModelOptions): string {
  writeFileSync(path, tinyGguf(opts));
  return path;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { seed: { type: 'string' }, noise: { type: 'string' }, vocab: { type: 'string' } },
  });
  const out = positionals[0];
  if (!out) {
    process.stderr.write('usage: tsx scripts/tiny-gguf.ts OUT.gguf [--seed N] [--noise X] [--vocab chars|wordpiece]\n');
    process.exit(2);
  }
  const seed = Number(values.seed ?? 1);
  const noise = Number(values.noise ?? 0);
  const vocab = values.vocab ?? 'chars';
  if (!Number.isInteger(seed) || !(noise >= 0) || (vocab !== 'chars' && vocab !== 'wordpiece')) {
    process.stderr.write('--seed must be a whole number, --noise a number ≥ 0, --vocab chars or wordpiece\n');
    process.exit(2);
  }
  writeTinyGguf(out, { seed, noise, vocab });
  process.stdout.write(`${out}\n`);
}
