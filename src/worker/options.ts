// `ins worker` options: each flag also as an environment variable, checked as a whole before
// anything starts (every problem on its own line, exit 2).
import { parseArgs } from 'node:util';

export type BackendKind = 'ollama' | 'openai' | 'vllm' | 'llamacpp';
const KINDS: BackendKind[] = ['ollama', 'openai', 'vllm', 'llamacpp'];

export interface WorkerOptions {
  server: string;
  node: string;
  key: string;
  backend: BackendKind;
  backendUrl: string;
  /** Continue answers another node began, on a backend that can (--continue auto); false: run them from the start. */
  continueAnswers: boolean;
  /** Only these of the backend's models (empty: all of them). */
  models: string[];
  concurrency: number;
  metricsPort: number | undefined;
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
  ['backend', 'INS_BACKEND', 'ollama, vllm, llamacpp, or openai (any OpenAI-compatible server; vLLM and llama.cpp are recognised)'],
  ['backend-url', 'INS_BACKEND_URL', 'the backend, e.g. http://127.0.0.1:11434 (Ollama) or http://127.0.0.1:8001 (OpenAI-compatible)'],
  ['models', 'INS_MODELS', 'serve only these of the backend\'s models, comma-separated (default: all)'],
  ['concurrency', 'INS_CONCURRENCY', 'jobs at once (default 1)'],
  ['metrics-port', 'INS_METRICS_PORT', 'serve Prometheus metrics on this port (default: off)'],
  ['grace', 'INS_GRACE_SECONDS', 'on SIGTERM/SIGINT, seconds to finish the jobs in flight (default 60)'],
  ['retry-max', 'INS_RETRY_MAX_SECONDS', 'while the coordinator is away, the longest pause between tries (default 30)'],
  ['continue', 'INS_CONTINUE', 'auto (default): continue answers another node began, where the backend can; off: run them from the start'],
];

export const WORKER_HELP = `usage: ins worker --server URL --node NAME --key nk_… --backend ollama|openai|vllm|llamacpp --backend-url URL
                  [--models m1,m2] [--concurrency N] [--metrics-port PORT] [--grace SECONDS]
                  [--retry-max SECONDS] [--continue auto|off]

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

A job whose node failed mid-answer comes with the answer's beginning: the worker continues it
where the backend can (Ollama 0.2.8+, vLLM 0.6.3+, llama.cpp's server since May 2025 unless
started with --no-prefill-assistant; --backend openai finds out which server it is), else
runs it from the start. A job canceled by its user, or whose lease ended, is aborted on the
backend at once and not reported.

On a terminal it keeps one status line; otherwise it logs JSON lines. SIGTERM or SIGINT stops
taking jobs, finishes those in flight (up to --grace), deregisters and exits 0.`;

export class WorkerUsageError extends Error {
  constructor(readonly problems: string[]) { super(problems.join('\n')); }
}

export function parseWorkerOptions(argv: string[], env: NodeJS.ProcessEnv): WorkerOptions | 'help' {
  const { values } = parseArgs({ args: argv, strict: true, options: { ...Object.fromEntries(FLAGS.map(([f]) => [f, { type: 'string' as const }])), help: { type: 'boolean', short: 'h' } } });
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
    if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) problems.push(`--${flag} must be a whole number from ${min} to ${max}, got "${v}"`);
    return Number(v);
  };
  const server = url('server');
  const node = required('node');
  const key = required('key');
  const backend = required('backend');
  if (backend && !KINDS.includes(backend as BackendKind)) problems.push(`--backend must be ${KINDS.slice(0, -1).join(', ')} or ${KINDS.at(-1)!}, got "${backend}"`);
  const backendUrl = url('backend-url');
  const models = (get('models') ?? '').split(',').map((m) => m.trim()).filter(Boolean);
  const concurrency = int('concurrency', 1, 1, 64);
  const metricsPort = get('metrics-port') === undefined ? undefined : int('metrics-port', 0, 0, 65535);
  const graceMs = int('grace', 60, 0, 3600) * 1000;
  const retryMaxMs = int('retry-max', 30, 1, 3600) * 1000;
  const continueMode = get('continue') ?? 'auto';
  if (continueMode !== 'auto' && continueMode !== 'off') problems.push(`--continue must be auto or off, got "${continueMode}"`);
  if (problems.length > 0) throw new WorkerUsageError(problems);
  return { server, node, key, backend: backend as BackendKind, backendUrl, continueAnswers: continueMode === 'auto', models, concurrency, metricsPort, graceMs, pollWait: 25, retryMaxMs };
}
