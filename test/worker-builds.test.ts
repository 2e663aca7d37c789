// `ins worker` declares what it runs (issue 31): Ollama's /api/tags digest and quantisation, a
// GGUF file's sha256 and file type, --quantization for an OpenAI-compatible server — stored by
// the real app on both backends and shown on /network; without them (a vLLM server and no flag)
// nothing is declared. The workers run in process against stub backends (test/helpers/backends.ts)
// and a real tiny GGUF model (test/helpers/gguf.ts).
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/database.js';
import { parseWorkerOptions } from '../src/worker/options.js';
import { backends } from './helpers/db.js';
import { startApp } from './helpers/app.js';
import { startFakeBackend, type FakeBackend } from './helpers/backends.js';
import { startWorker, type InProcessWorker } from './helpers/worker.js';
import { tinyModels } from './helpers/gguf.js';

const models = tinyModels();
afterAll(() => models.remove());

describe.each(backends)('ins worker declares its builds ($name)', (backend) => {
  it("Ollama: digest and quantisation from /api/tags; gguf: the file's sha256 and type; OpenAI-compatible: --quantization or nothing", {
    timeout: 180_000,
  }, async () => {
    const t = await startApp(backend);
    const fakes: FakeBackend[] = [];
    const workers: InProcessWorker[] = [];
    try {
      const url = await t.app.listen({ port: 0, host: '127.0.0.1' });
      const start = async (node: string, kind: 'ollama' | 'vllm', model: string, extra: Record<string, unknown> = {}) => {
        const fake = await startFakeBackend(kind, [model]);
        fakes.push(fake);
        workers.push(await startWorker({ server: url, node, key: await t.addNode(node), backend: kind, backendUrl: fake.url, ...extra }));
      };
      await start('ollama-node', 'ollama', 'llama3.2:latest');
      await start('vllm-q', 'vllm', 'llama3.2:latest', { quantization: 'awq' });
      await start('vllm-plain', 'vllm', 'plain-model');
      const file = models.file({ seed: 1 });
      workers.push(
        await startWorker({
          server: url,
          node: 'gguf-node',
          key: await t.addNode('gguf-node'),
          backend: 'gguf',
          backendUrl: '',
          modelFile: file,
          models: ['tiny:1'],
          threads: 1,
        }),
      );

      const rows = await t.db.query<{ node: string; model: string; digest: string | null; quantization: string | null }>(
        sql(
          't_wb_rows',
          `SELECT n.name AS node, m.name AS model, b.digest, b.quantization
        FROM session_model_builds b JOIN node_sessions s ON s.id = b.session_id JOIN nodes n ON n.id = s.node_id JOIN models m ON m.id = b.model_id ORDER BY n.name`,
        ),
      );
      const sha = `sha256:${createHash('sha256').update(readFileSync(file)).digest('hex')}`;
      expect(rows).toEqual([
        // The tiny model's file writes no general.file_type (scripts/tiny-gguf.ts): no quantisation is declared.
        { node: 'gguf-node', model: 'tiny:1', digest: sha, quantization: null },
        { node: 'ollama-node', model: 'llama3.2:latest', digest: 'sha256:0', quantization: 'Q4_K_M' },
        { node: 'vllm-q', model: 'llama3.2:latest', digest: null, quantization: 'awq' },
      ]);
      const network = (await t.app.inject({ method: 'GET', url: '/network', headers: { api_key: await t.addReader() } })).json() as {
        models: { name: string; nodes: number; quantizations: unknown }[];
      };
      expect(network.models.find((m) => m.name === 'llama3.2:latest')).toMatchObject({
        nodes: 2,
        quantizations: [
          { quantization: 'Q4_K_M', nodes: 1 },
          { quantization: 'awq', nodes: 1 },
        ],
      });
      expect(network.models.find((m) => m.name === 'plain-model')).toMatchObject({ nodes: 1, quantizations: [] });
    } finally {
      for (const w of workers) await w.stop();
      for (const f of fakes) await f.close();
      await t.close();
    }
  });
});

describe('--quantization', () => {
  const base = ['--server', 'http://c:8000', '--node', 'n', '--key', 'nk_x'];
  it('is for OpenAI-compatible servers, an identifier', () => {
    expect(
      (
        parseWorkerOptions([...base, '--backend', 'vllm', '--backend-url', 'http://b:8001', '--quantization', 'Q4_K_M'], {}) as {
          quantization?: string;
        }
      ).quantization,
    ).toBe('Q4_K_M');
    expect(
      (
        parseWorkerOptions([...base, '--backend', 'openai', '--backend-url', 'http://b:8001'], { INS_QUANTIZATION: 'fp8' }) as {
          quantization?: string;
        }
      ).quantization,
    ).toBe('fp8');
    expect(() => parseWorkerOptions([...base, '--backend', 'ollama', '--backend-url', 'http://b:11434', '--quantization', 'Q4'], {})).toThrow(
      /--quantization is for OpenAI-compatible/,
    );
    expect(() => parseWorkerOptions([...base, '--backend', 'vllm', '--backend-url', 'http://b:8001', '--quantization', 'has space'], {})).toThrow(
      /--quantization must be/,
    );
  });
});
