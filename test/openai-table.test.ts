// The table of OpenAI chat fields at a glance (docs/openai.md, "The fields at a glance") kept true:
// each row's fields are sent, one at a time, with a value that means something, and must be
// honoured (carried in the job), accepted (no error) or refused (400 unsupported_parameter
// naming the field), as the row says. A field the parser does not know the value of fails here.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseChatRequest } from '../src/routes/openai/request.js';
import { OpenAIError } from '../src/routes/openai/errors.js';

const TOOL = { type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } };
// A meaningful value of each field the table names (for refused fields: a value that is not a no-op).
const VALUES: Record<string, unknown> = {
  model: 'm',
  messages: [{ role: 'user', content: 'hi' }],
  max_tokens: 5,
  max_completion_tokens: 5,
  temperature: 0.2,
  seed: 3,
  stream: true,
  stream_options: { include_usage: true },
  stop: ['x'],
  top_p: 0.5,
  presence_penalty: 1,
  frequency_penalty: 1,
  response_format: { type: 'json_object' },
  logprobs: true,
  top_logprobs: 2,
  tools: [TOOL],
  tool_choice: 'required',
  parallel_tool_calls: false,
  user: 'u',
  metadata: { a: 'b' },
  service_tier: 'auto',
  prompt_cache_key: 'k',
  prompt_cache_retention: '24h',
  safety_identifier: 's',
  n: 2,
  logit_bias: { 50256: -100 },
  functions: [{ name: 'f', parameters: {} }],
  function_call: 'auto',
  audio: { voice: 'alloy', format: 'wav' },
  modalities: ['text', 'audio'],
  prediction: { type: 'content', content: 'x' },
  web_search_options: {},
  reasoning_effort: 'low',
};
// What a field needs beside it to be valid (json_object needs a message saying json; top_logprobs needs logprobs; tool_choice and parallel_tool_calls need tools; stream_options needs stream).
const WITH: Record<string, Record<string, unknown>> = {
  response_format: { messages: [{ role: 'user', content: 'hi, in JSON' }] },
  top_logprobs: { logprobs: true },
  tool_choice: { tools: [TOOL] },
  parallel_tool_calls: { tools: [TOOL] },
  stream_options: { stream: true },
};
const LIMITS = { defaultTimeout: 240, maxTimeout: 3600 };

function glanceTable(): { fields: string[]; status: string }[] {
  const page = readFileSync(new URL('../docs/openai.md', import.meta.url), 'utf8');
  const section = page.slice(page.indexOf('### The fields at a glance'));
  const lines = section.slice(section.indexOf('| Field | Status |')).split('\n');
  const rows = lines.slice(
    2,
    lines.findIndex((l) => !l.startsWith('|')),
  );
  return rows.map((l) => {
    const [fields, status] = l
      .split('|')
      .slice(1, 3)
      .map((c) => c.trim());
    return { fields: [...fields!.matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!), status: status! };
  });
}

describe("docs/openai.md's table of OpenAI fields at a glance", () => {
  const table = glanceTable();

  it('has rows of each kind', () => {
    expect(new Set(table.map((r) => r.status))).toEqual(new Set(['honoured', 'accepted', 'refused']));
  });

  for (const { fields, status } of table) {
    for (const field of fields) {
      it(`${field}: ${status}`, () => {
        expect(VALUES, `a value for ${field}`).toHaveProperty(field);
        const body = { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...WITH[field], [field]: VALUES[field] };
        if (status === 'refused') {
          let err: unknown;
          try {
            parseChatRequest(body, LIMITS);
          } catch (e) {
            err = e;
          }
          expect(err).toBeInstanceOf(OpenAIError);
          expect((err as OpenAIError).body().error).toMatchObject({ type: 'invalid_request_error', param: field, code: 'unsupported_parameter' });
          return;
        }
        const chat = parseChatRequest(body, LIMITS);
        const plain = parseChatRequest({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...WITH[field] }, LIMITS);
        if (status === 'accepted') return expect(chat).toEqual(plain);
        // Honoured: the job differs from one without the field (it carries it).
        expect(chat, field).not.toEqual(field === 'model' || field === 'messages' ? {} : plain);
      });
    }
  }
});
