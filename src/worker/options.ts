// `ins worker` options: each flag also as an environment variable, checked as a whole before
// anything starts (every problem on its own line, exit 2).
import { parseArgs } from 'node:util';
import { notWholeNumberFlag, wholeNumber } from '../whole-number.js';

export type BackendKind = 'ollama' | 'openai' | 'vllm' | 'llamacpp' | 'gguf';
const KINDS: BackendKind[] = ['ollama', 'openai', 'vllm', 'llamacpp', 'gguf'];

export interface WorkerOptions {
  server: string;
  node: string;
  key: string;
  backend: BackendKind;
  /** gguf: none (the model runs in the worker's process). */
  backendUrl: string;
  /** gguf: the model file; its name is the one model in `models`. */
  modelFile?: string;
  /** gguf: llama.cpp's CPU threads (undefined: every core). */
  threads?: number;
  /** OpenAI-compatible servers: the quantisation they run, declared for every model (issue 31; Ollama and gguf say it themselves). */
  quantization?: string;
  /** Issue 53: the context length (tokens) to declare for every model, over what the backend says (--context-length). */
  contextLength?: number;
  /** Continue answers another node began, on a backend that can (--continue auto); false: run them from the start. */
  continueAnswers: boolean;
  /** Only these of the backend's models (empty: all of them). */
  models: string[];
  concurrency: number;
  metricsPort: number | undefined;
  /** How often the backend's models and the node's standing are looked at again, in ms (no flag: a minute; tests shorten it). */
  checkEveryMs?: number;
  /** How long a stop (SIGTERM/SIGINT) waits for jobs in flight, in ms. */
  graceMs: number;
  /** Seconds a get_job poll waits for a job. */
  pollWait: number;
  /** The longest pause between tries to reach a coordinator that is away, in ms. */
  retryMaxMs: number;
}

const FLAGS: [flag: string, env: string, help: string][] = [
  ['server', 'INS_SERVER', 'the coordinator, e.g. http://coordinator:8000'],
  ['node', 'INS_NODE', "this node's name (as `ins node add NAME` made it)"],
  ['key', 'INS_NODE_KEY', "the node's key, nk_…"],
  [
    'backend',
    'INS_BACKEND',
    'ollama, vllm, llamacpp, openai (any OpenAI-compatible server; vLLM and llama.cpp are recognised), or gguf (a model file run by the worker itself)',
  ],
  [
    'backend-url',
    'INS_BACKEND_URL',
    'the backend, e.g. http://127.0.0.1:11434 (Ollama) or http://127.0.0.1:8001 (OpenAI-compatible; with or without /v1); not with gguf',
  ],
  ['model-file', 'INS_MODEL_FILE', 'gguf: the GGUF file to serve (needs node-llama-cpp, docs/worker.md)'],
  ['threads', 'INS_THREADS', 'gguf: CPU threads for the model (default: every core)'],
  [
    'quantization',
    'INS_QUANTIZATION',
    'openai, vllm, llamacpp: the quantisation the server runs (e.g. Q4_K_M, awq, fp16), declared for its models; Ollama and gguf say it themselves',
  ],
  [
    'context-length',
    'INS_CONTEXT_LENGTH',
    "the context length (tokens) to declare for every model, over what the backend says (gguf: the loaded context; vLLM: max_model_len; Ollama: a Modelfile's num_ctx); a job longer is not given to the node",
  ],
  [
    'models',
    'INS_MODELS',
    "serve only these of the backend's models, comma-separated (default: all; a name without a tag is its :latest, as in Ollama); gguf: the one name the file is served as",
  ],
  ['concurrency', 'INS_CONCURRENCY', 'jobs at once (default 1)'],
  ['metrics-port', 'INS_METRICS_PORT', 'serve Prometheus metrics on this port (default: off)'],
  ['grace', 'INS_GRACE_SECONDS', 'on SIGTERM/SIGINT, seconds to finish the jobs in flight (default 60)'],
  ['retry-max', 'INS_RETRY_MAX_SECONDS', 'while the coordinator is away, the longest pause between tries (default 30)'],
  ['continue', 'INS_CONTINUE', 'auto (default): continue answers another node began, where the backend can; off: run them from the start'],
];

export const WORKER_HELP = `usage: ins worker --server URL --node NAME --key nk_… --backend ollama|openai|vllm|llamacpp --backend-url URL
       ins worker --server URL --node NAME --key nk_… --backend gguf --model-file PATH --models NAME
                  [--models m1,m2] [--concurrency N] [--metrics-port PORT] [--grace SECONDS]
                  [--retry-max SECONDS] [--continue auto|off] [--quantization Q] [--threads N]
                  [--context-length TOKENS]

Runs this machine as a node of the network: registers with the coordinator, declares the
models its backend has, takes jobs, runs them on the backend and reports the answers.

options (each also as an environment variable):
${FLAGS.map(([f, env, help]) => `  --${f.padEnd(14)} ${env.padEnd(22)} ${help}`).join('\n')}

examples:
  # Next to Ollama, serving all its models:
  npx ins worker --server http://coordinator:8000 --node my-gpu-01 --key nk_… \\
    --backend ollama --backend-url http://127.0.0.1:11434
  # A vLLM server, one model, four jobs at once:
  INS_NODE_KEY=nk_… npx ins worker --server http://coordinator:8000 --node my-gpu-02 \\
    --backend vllm --backend-url http://127.0.0.1:8001 --models meta-llama/Llama-3.1-8B-Instruct --concurrency 4
  # No inference server: a GGUF file run by llama.cpp on the CPU, in the worker itself:
  npx ins worker --server http://coordinator:8000 --node my-cpu-01 --key nk_… \\
    --backend gguf --model-file ./qwen2.5-0.5b-instruct-q4_k_m.gguf --models qwen2.5:0.5b

A job whose node failed mid-answer comes with the answer's beginning: the worker continues it
where the backend can (Ollama 0.2.8+, vLLM 0.6.3+, llama.cpp's server since May 2025 unless
started with --no-prefill-assistant; --backend openai finds out which server it is), else
runs it from the start. A job canceled by its user, or whose lease ended, is aborted on the
backend at once and not reported.

On a terminal it keeps one status line; otherwise it logs JSON lines. SIGTERM or SIGINT stops
taking jobs, finishes those in flight (up to --grace), deregisters and exits 0.`;

export class WorkerUsageError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('\n'));
  }
}

export function parseWorkerOptions(argv: string[], env: NodeJS.ProcessEnv): WorkerOptions | 'help' {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: { ...Object.fromEntries(FLAGS.map(([f]) => [f, { type: 'string' as const }])), help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) return 'help';
  const problems: string[] = [];
  const get = (flag: string): string | undefined => {
    const env_ = FLAGS.find(([f]) => f === flag)![1];
    const v = (values as Record<string, string | undefined>)[flag] ?? env[env_];
    return v === undefined || v.trim() === '' ? undefined : v.trim();
  };
  const required = (flag: string): string => {
    const v = get(flag);
    if (v === undefined) problems.push(`--${flag} (or ${FLAGS.find(([f]) => f === flag)![1]}) is required`);
    return v ?? '';
  };
  const url = (flag: string): string => {
    const v = required(flag);
    if (v && !/^https?:\/\/[^\s/]+/.test(v)) problems.push(`--${flag} must be an http(s) URL, got "${v}"`);
    return v.replace(/\/+$/, '');
  };
  const int = (flag: string, fallback: number, min: number, max: number): number => {
    const v = get(flag);
    if (v === undefined) return fallback;
    const n = wholeNumber(v, min, max);
    if (n === undefined) problems.push(notWholeNumberFlag(flag, v, min, max));
    return n ?? fallback;
  };
  const server = url('server');
  const node = required('node');
  const key = required('key');
  const backend = required('backend');
  if (backend && !KINDS.includes(backend as BackendKind))
    problems.push(`--backend must be ${KINDS.slice(0, -1).join(', ')} or ${KINDS.at(-1)!}, got "${backend}"`);
  const gguf = backend === 'gguf';
  const backendUrl = gguf ? '' : url('backend-url');
  if (gguf && get('backend-url') !== undefined)
    problems.push('--backend-url is not for --backend gguf (the model runs in the worker): give --model-file');
  const modelFile = gguf ? required('model-file') : undefined;
  if (!gguf && get('model-file') !== undefined) problems.push('--model-file is only for --backend gguf');
  const threads = get('threads') === undefined ? undefined : int('threads', 0, 1, 256);
  if (!gguf && threads !== undefined) problems.push('--threads is only for --backend gguf');
  const quantization = get('quantization');
  if (quantization !== undefined && (backend === 'ollama' || gguf))
    problems.push(`--quantization is for OpenAI-compatible servers: ${backend} says what it runs itself`);
  if (quantization !== undefined && !/^[\x21-\x7e]{1,32}$/.test(quantization))
    problems.push(`--quantization must be 1 to 32 printable characters without spaces, got "${quantization}"`);
  const contextLength = get('context-length') === undefined ? undefined : int('context-length', 0, 1, 100_000_000);
  const models = (get('models') ?? '')
    .split(',')
    .map((m) => m.trim())
    .filter(Boolean);
  if (gguf && models.length !== 1) problems.push('--backend gguf serves its file under one name: give it as --models NAME');
  const concurrency = int('concurrency', 1, 1, 64);
  const metricsPort = get('metrics-port') === undefined ? undefined : int('metrics-port', 0, 0, 65535);
  const graceMs = int('grace', 60, 0, 3600) * 1000;
  const retryMaxMs = int('retry-max', 30, 1, 3600) * 1000;
  const continueMode = get('continue') ?? 'auto';
  if (continueMode !== 'auto' && continueMode !== 'off') problems.push(`--continue must be auto or off, got "${continueMode}"`);
  if (problems.length > 0) throw new WorkerUsageError(problems);
  return {
    server,
    node,
    key,
    backend: backend as BackendKind,
    backendUrl,
    ...(modelFile ? { modelFile } : {}),
    ...(threads ? { threads } : {}),
    ...(quantization ? { quantization } : {}),
    ...(contextLength ? { contextLength } : {}),
    continueAnswers: continueMode === 'auto',
    models,
    concurrency,
    metricsPort,
    graceMs,
    pollWait: 25,
    retryMaxMs,
  };
}
