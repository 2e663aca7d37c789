// The JSON Schemas of `strict: true` (a function tool's parameters, response_format's
// json_schema): OpenAI guarantees an answer that matches them, a node may not (an Ollama backend
// does not constrain tool arguments, and nodes are untrusted), so the answer is checked here
// before the app sees it (answer-shape.ts). Ajv, which Fastify itself validates with, compiles
// each schema once per request, at parse time, so that a schema it cannot compile is a 400 then
// rather than a failed answer later. `pattern`, `patternProperties` and `format` are not checked:
// the schema is the user's and the data the node's, and a user's regular expression run on a
// node's text here could hold the server's one thread (docs/openai.md).
import { Ajv, type ValidateFunction } from 'ajv';
import { invalidRequest } from './errors.js';

const ajv = new Ajv({ strict: false, validateFormats: false, allErrors: false, validateSchema: true, addUsedSchema: false });
ajv.removeKeyword('pattern');
ajv.removeKeyword('patternProperties');
ajv.removeKeyword('format');

const compiled = new WeakMap<object, ValidateFunction>();

/** Compiles a strict schema for checking answers later (checkStrict); one Ajv cannot compile is a 400 naming `param`. */
export function compileStrict(schema: Record<string, unknown>, param: string): void {
  if (compiled.has(schema)) return;
  try {
    compiled.set(schema, ajv.compile(schema));
  } catch (err) {
    throw invalidRequest(`Invalid schema for '${param}' (strict): ${(err as Error).message}.`, param, 'invalid_value');
  }
}

/** Why the value does not match the strict schema compiled for it (compileStrict), or undefined when it does. */
export function strictMismatch(schema: Record<string, unknown>, value: unknown): string | undefined {
  const validate = compiled.get(schema);
  if (!validate || validate(value)) return undefined;
  const e = validate.errors?.[0];
  return e ? `${e.instancePath || '(the whole value)'} ${e.message ?? 'does not match'}` : 'does not match';
}
