// Prompts for the tests that run real tiny models (scripts/tiny-gguf.ts): 3 to 10 words of a
// short list, drawn from a generator the test seeds, so that its jobs (and so its models'
// answers, and what the checks make of them) are the same on every run.

const WORDS = [
  'river',
  'stone',
  'bridge',
  'tell',
  'me',
  'about',
  'the',
  'old',
  'city',
  'why',
  'how',
  'light',
  'write',
  'a',
  'poem',
  'explain',
  'numbers',
  'Paris',
  'cold',
  'sea',
];

/**
 * A linear congruential generator of numbers in [0, 1) from `seed`, and prompts drawn from it.
 * The two share one state: a test's own draws (`rand`) and its prompts interleave as they are made.
 */
export function seededPrompts(seed: number, words: readonly string[] = WORDS) {
  let x = seed;
  const rand = () => (x = (x * 1103515245 + 12345) % 2147483648) / 2147483648;
  const prompt = () => Array.from({ length: 3 + Math.floor(rand() * 8) }, () => words[Math.floor(rand() * words.length)]).join(' ');
  return { rand, prompt };
}
