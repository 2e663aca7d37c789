// `ins worker` options (src/worker/options.ts): the backends it knows, --continue and
// --retry-max, as flags and as environment variables; every problem reported at once.
import { describe, expect, it } from 'vitest';
import { parseWorkerOptions, WorkerUsageError, WORKER_HELP } from '../src/worker/options.js';

const base = ['--server', 'http://coordinator:8000', '--node', 'gpu-1', '--key', 'nk_x', '--backend-url', 'http://127.0.0.1:8001'];
const parse = (argv: string[], env: NodeJS.ProcessEnv = {}) => parseWorkerOptions([...base, ...argv], env);
const problems = (argv: string[], env: NodeJS.ProcessEnv = {}) => {
  try {
    parse(argv, env);
  } catch (err) {
    if (err instanceof WorkerUsageError) return err.problems;
    throw err;
  }
  return [];
};

describe('ins worker options', () => {
  it('knows ollama, openai, vllm and llamacpp; continues answers and retries up to 30 s unless told otherwise', () => {
    for (const backend of ['ollama', 'openai', 'vllm', 'llamacpp'])
      expect(parse(['--backend', backend])).toMatchObject({ backend, continueAnswers: true, retryMaxMs: 30_000 });
    expect(parse(['--backend', 'vllm', '--continue', 'off', '--retry-max', '2'])).toMatchObject({ continueAnswers: false, retryMaxMs: 2_000 });
    expect(parse([], { INS_BACKEND: 'llamacpp', INS_CONTINUE: 'off', INS_RETRY_MAX_SECONDS: '5' })).toMatchObject({
      backend: 'llamacpp',
      continueAnswers: false,
      retryMaxMs: 5_000,
    });
  });

  it('says what is wrong, all at once', () => {
    expect(problems(['--backend', 'tgi', '--continue', 'maybe', '--retry-max', '0'])).toEqual([
      '--backend must be ollama, openai, vllm, llamacpp or gguf, got "tgi"',
      '--retry-max must be a whole number from 1 to 3600, got "0"',
      '--continue must be auto or off, got "maybe"',
    ]);
  });

  it('gguf: a model file and one name instead of a backend URL, each mistake said', () => {
    const gguf = ['--server', 'http://coordinator:8000', '--node', 'cpu-1', '--key', 'nk_x', '--backend', 'gguf'];
    expect(parseWorkerOptions([...gguf, '--model-file', '/m/tiny.gguf', '--models', 'tiny', '--threads', '2'], {})).toMatchObject({
      backend: 'gguf',
      backendUrl: '',
      modelFile: '/m/tiny.gguf',
      models: ['tiny'],
      threads: 2,
    });
    expect(parseWorkerOptions(gguf, { INS_MODEL_FILE: '/m/tiny.gguf', INS_MODELS: 'tiny' })).toMatchObject({
      modelFile: '/m/tiny.gguf',
      models: ['tiny'],
    });
    const wrong = (argv: string[]) => {
      try {
        parseWorkerOptions([...gguf, ...argv], {});
      } catch (err) {
        return (err as WorkerUsageError).problems;
      }
      return [];
    };
    expect(wrong(['--backend-url', 'http://127.0.0.1:1', '--models', 'a,b'])).toEqual([
      '--backend-url is not for --backend gguf (the model runs in the worker): give --model-file',
      '--model-file (or INS_MODEL_FILE) is required',
      '--backend gguf serves its file under one name: give it as --models NAME',
    ]);
    expect(problems(['--backend', 'ollama', '--model-file', '/m/tiny.gguf', '--threads', '2'])).toEqual([
      '--model-file is only for --backend gguf',
      '--threads is only for --backend gguf',
    ]);
  });

  it('--help shows the new options', () => {
    expect(parseWorkerOptions(['--help'], {})).toBe('help');
    for (const text of [
      '--backend ollama|openai|vllm|llamacpp',
      '--backend gguf --model-file PATH',
      'INS_MODEL_FILE',
      '--continue',
      'INS_CONTINUE',
      '--retry-max',
      'INS_RETRY_MAX_SECONDS',
    ])
      expect(WORKER_HELP).toContain(text);
  });
});
