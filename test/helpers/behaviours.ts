// How the test backends' "models" answer, for the verification tests: deterministic prose for a
// prompt (an honest node at temperature 0), the same with a few words changed at random (an
// honest node whose answers vary, as sampling and GPU arithmetic make them), and the fakes
// public farming tools use: one canned text for everything, and answers replayed from earlier
// jobs with their whitespace jittered. No model runs here; the words are drawn from a list.
import { createHash } from 'node:crypto';
import type { AnswerFn } from './backends.js';

const WORDS = (
  'the a of and to in is that it for on with as was at by an be this which from or have one had not but what all were when we there can ' +
  'light water river stone city night winter garden market bridge paper clock harbour salt honey mountain ocean bread violin desert glacier ' +
  'quiet bright ancient small heavy gentle distant careful golden narrow patient sudden curious hollow warm slow clear deep old new ' +
  'runs falls turns rests grows carries holds breaks gathers shines sings waits answers remembers builds follows opens keeps'
).split(' ');

/** A deterministic stream of numbers for a text. */
function* numbers(text: string): Generator<number> {
  for (let i = 0; ; i++) {
    const h = createHash('sha256').update(`${i}:${text}`).digest();
    for (let k = 0; k + 4 <= h.length; k += 4) yield h.readUInt32BE(k);
  }
}

/** About 40 to 60 words that depend only on the model and the prompt. */
export function prose(model: string, prompt: string): string {
  const n = numbers(`${model}\n${prompt}`);
  const length = 40 + ((n.next().value as number) % 21);
  const words: string[] = [];
  for (let i = 0; i < length; i++) words.push(WORDS[(n.next().value as number) % WORDS.length]!);
  return `${words.join(' ')}.`;
}

const lastPrompt = (messages: { content: string }[]): string => messages.at(-1)?.content ?? '';

export const honest: AnswerFn = (model, messages) => prose(model, lastPrompt(messages));

/** Honest, with each word replaced at random with probability `rate`. */
export const noisy =
  (rate: number): AnswerFn =>
  (model, messages) =>
    honest(model, messages)
      .split(' ')
      .map((w) => (Math.random() < rate ? WORDS[Math.floor(Math.random() * WORDS.length)]! : w))
      .join(' ');

/** The same text, whatever is asked. */
export const canned: AnswerFn = () =>
  'Thank you for your question. Here is a helpful and detailed answer that covers the topic you asked about in full.';

/** Whitespace jitter: the trick farming tools use so that hashes of replayed answers differ. */
export const jitter = (text: string): string =>
  text
    .split(' ')
    .map((w) => w + (Math.random() < 0.3 ? '  ' : Math.random() < 0.1 ? '\n' : ' '))
    .join('')
    .trimEnd();

/** Answers the first prompt honestly, then replays an earlier answer (to another prompt) with jitter. */
export function replayer(): AnswerFn {
  const earlier: string[] = [];
  return (model, messages) => {
    if (earlier.length === 0) {
      earlier.push(honest(model, messages));
      return earlier[0]!;
    }
    return jitter(earlier[Math.floor(Math.random() * earlier.length)]!);
  };
}
