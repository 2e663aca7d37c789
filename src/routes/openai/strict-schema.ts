// The JSON Schemas of `strict: true` (a function tool's parameters, response_format's
// json_schema): OpenAI guarantees an answer that matches them, a node may not (an Ollama backend
// does not constrain tool arguments, and nodes are untrusted), so the answer is checked here
// before the app is given it (answer-shape.ts). Ajv, which Fastify itself validates with, compiles
// each schema when the request arrives, so that one it cannot compile is a 400 then rather than
// a failed answer later.
//
// The schema is the user's and the data the node's, and both run on the server's one thread:
// - keywords whose cost grows faster than the data are not checked: `pattern` and
//   `patternProperties` (a user's regular expression on a node's text), `uniqueItems`
//   (quadratic), `format`; OpenAI's strict mode has no `uniqueItems` either;
// - a schema is at most MAX_SCHEMA_BYTES as JSON: Ajv compiles about 0.4 ms a property here
//   (300 properties, 17 KB: 126 ms; 1.7 s for a 500 KB one, a review), once per distinct schema;
// - compiled validators are kept by the schema's text (apps send the same tools with every
//   request), at most CACHE_SIZE of them; Ajv keeps what it compiled for good, so after
//   RENEW_AFTER compiles the next come from a new instance and the old one goes with its
//   validators.
import { Ajv, type ValidateFunction } from 'ajv';
import { invalidRequest } from './errors.js';

const MAX_SCHEMA_BYTES = 16 * 1024;
const CACHE_SIZE = 256;
const RENEW_AFTER = 1_000;

function newAjv(): Ajv {
  const ajv = new Ajv({ strict: false, validateFormats: false, allErrors: false });
  for (const keyword of ['pattern', 'patternProperties', 'uniqueItems', 'format']) ajv.removeKeyword(keyword);
  return ajv;
}

let ajv = newAjv();
let compiles = 0;
/** Validators by the schema's JSON text, least recently used first. */
const byText = new Map<string, ValidateFunction>();
/** The request's own schema objects, to their validators (answer-shape.ts checks with the object it parsed). */
const bySchema = new WeakMap<object, ValidateFunction>();

function compile(schema: Record<string, unknown>): ValidateFunction {
  // The draft a schema names (Zod 4 writes 2020-12) is not one this Ajv loads: the keywords are read as draft-07's.
  const { $schema: _draft, ...rest } = schema;
  if (++compiles > RENEW_AFTER) {
    ajv = newAjv();
    compiles = 1;
  }
  try {
    return ajv.compile(rest);
  } finally {
    // Its $id free for the next request's schema of the same $id.
    ajv.removeSchema(rest);
  }
}

/** Compiles a strict schema for checking answers later (strictMismatch); one Ajv cannot compile, or too large, is a 400 naming `param`. */
export function compileStrict(schema: Record<string, unknown>, param: string): void {
  if (bySchema.has(schema)) return;
  const text = JSON.stringify(schema);
  if (text.length > MAX_SCHEMA_BYTES)
    throw invalidRequest(
      `Invalid schema for '${param}' (strict): at most ${MAX_SCHEMA_BYTES} bytes as JSON, to be checked here.`,
      param,
      'invalid_value',
    );
  let validate = byText.get(text);
  if (validate) {
    byText.delete(text);
  } else {
    try {
      validate = compile(schema);
    } catch (err) {
      throw invalidRequest(`Invalid schema for '${param}' (strict): ${(err as Error).message}.`, param, 'invalid_value');
    }
    if (byText.size >= CACHE_SIZE) byText.delete(byText.keys().next().value!);
  }
  byText.set(text, validate);
  bySchema.set(schema, validate);
}

/** Why the value does not match the strict schema compiled for it (compileStrict), or undefined when it does. */
export function strictMismatch(schema: Record<string, unknown>, value: unknown): string | undefined {
  const validate = bySchema.get(schema);
  if (!validate || validate(value)) return undefined;
  const e = validate.errors?.[0];
  return e ? `${e.instancePath || '(the whole value)'} ${e.message ?? 'does not match'}` : 'does not match';
}
