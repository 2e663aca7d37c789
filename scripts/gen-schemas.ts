// Generates src/generated/schemas.ts (TypeBox) from openapi.json, the single source of the wire
// contract. `npm run gen` writes the file; test/generated.test.ts fails when it is stale.
// Handles the JSON-Schema subset openapi.json uses; anything else is an error, not a guess.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type JsonSchema = { [k: string]: Json };

interface Parameter {
  name: string;
  in: string;
  required?: boolean;
  description?: string;
  schema: JsonSchema;
}
interface Response {
  content?: Record<string, { schema?: JsonSchema }>;
}
interface Operation {
  operationId: string;
  parameters?: Parameter[];
  responses: Record<string, Response>;
}
interface OpenApi {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, JsonSchema> };
}

// Keywords copied as TypeBox options; everything else must be handled explicitly.
const OPTION_KEYS = [
  'title',
  'description',
  'format',
  'minLength',
  'maxLength',
  'minimum',
  'maximum',
  'minItems',
  'maxItems',
  'additionalProperties',
];
const STRUCTURAL_KEYS = ['type', 'properties', 'required', 'items', 'anyOf', 'enum', '$ref'];

function options(schema: JsonSchema): string {
  const unknown = Object.keys(schema).filter((k) => !OPTION_KEYS.includes(k) && !STRUCTURAL_KEYS.includes(k));
  if (unknown.length > 0) throw new Error(`unsupported keywords: ${unknown.join(', ')}`);
  const picked = OPTION_KEYS.filter((k) => k in schema).map((k) => `${k}: ${JSON.stringify(schema[k])}`);
  return picked.length === 0 ? '' : `{ ${picked.join(', ')} }`;
}

function withOptions(call: string, args: string[], schema: JsonSchema): string {
  const opts = options(schema);
  return `${call}(${[...args, ...(opts ? [opts] : [])].join(', ')})`;
}

function refName(ref: string): string {
  const prefix = '#/components/schemas/';
  if (!ref.startsWith(prefix)) throw new Error(`unsupported $ref ${ref}`);
  return ref.slice(prefix.length);
}

function render(schema: JsonSchema, indent: string): string {
  if (typeof schema.$ref === 'string') return refName(schema.$ref);
  if (Array.isArray(schema.enum)) {
    const literals = schema.enum.map((v) => `Type.Literal(${JSON.stringify(v)})`);
    const { enum: _enum, type: _type, ...rest } = schema;
    return withOptions('Type.Union', [`[${literals.join(', ')}]`], rest);
  }
  if (Array.isArray(schema.anyOf)) {
    const members = schema.anyOf.map((s) => render(s as JsonSchema, indent));
    const { anyOf: _anyOf, ...rest } = schema;
    return withOptions('Type.Union', [`[${members.join(', ')}]`], rest);
  }
  switch (schema.type) {
    case 'string':
      return withOptions('Type.String', [], schema);
    case 'integer':
      return withOptions('Type.Integer', [], schema);
    case 'number':
      return withOptions('Type.Number', [], schema);
    case 'boolean':
      return withOptions('Type.Boolean', [], schema);
    case 'null':
      return withOptions('Type.Null', [], schema);
    case 'array': {
      const { items, ...rest } = schema;
      return withOptions('Type.Array', [render(items as JsonSchema, indent)], rest);
    }
    case 'object': {
      const { properties = {}, required = [], ...rest } = schema;
      const props = properties as Record<string, JsonSchema>;
      const req = required as string[];
      const inner = indent + '  ';
      const lines = Object.entries(props).map(([name, prop]) => {
        const rendered = render(prop, inner);
        return `${inner}${name}: ${req.includes(name) ? rendered : `Type.Optional(${rendered})`},`;
      });
      const body = lines.length === 0 ? '{}' : `{\n${lines.join('\n')}\n${indent}}`;
      return withOptions('Type.Object', [body], rest);
    }
    case undefined: {
      // No type: any JSON value (e.g. ValidationError.input).
      return withOptions('Type.Unknown', [], schema);
    }
    default:
      throw new Error(`unsupported type ${JSON.stringify(schema.type)}`);
  }
}

function refsOf(schema: Json): string[] {
  if (Array.isArray(schema)) return schema.flatMap(refsOf);
  if (schema === null || typeof schema !== 'object') return [];
  const own = typeof schema.$ref === 'string' ? [refName(schema.$ref)] : [];
  return [...own, ...Object.values(schema).flatMap(refsOf)];
}

// Components in dependency order (a schema after those it references), then by name.
function ordered(schemas: Record<string, JsonSchema>): string[] {
  const done: string[] = [];
  const visit = (name: string, stack: string[]): void => {
    if (done.includes(name)) return;
    if (stack.includes(name)) throw new Error(`recursive schema ${name}`);
    for (const dep of refsOf(schemas[name] ?? null)) visit(dep, [...stack, name]);
    done.push(name);
  };
  for (const name of Object.keys(schemas).sort()) visit(name, []);
  return done;
}

function pascal(id: string): string {
  return id
    .split(/[_\W]+/)
    .filter(Boolean)
    .map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join('');
}

// Query and path parameters of each operation become one object schema each, named
// <OperationId>Query and <OperationId>Params.
function parameterSchemas(doc: OpenApi): string[] {
  const out: string[] = [];
  const kinds = [
    ['query', 'Query'],
    ['path', 'Params'],
  ] as const;
  for (const op of Object.values(doc.paths).flatMap((methods) => Object.values(methods))) {
    for (const [where, suffix] of kinds) {
      const params = (op.parameters ?? []).filter((p) => p.in === where);
      if (params.length === 0) continue;
      const schema: JsonSchema = {
        type: 'object',
        properties: Object.fromEntries(params.map((p) => [p.name, { ...p.schema, ...(p.description ? { description: p.description } : {}) }])),
        required: params.filter((p) => p.required).map((p) => p.name),
      };
      const name = `${pascal(op.operationId)}${suffix}`;
      out.push(`export const ${name} = ${render(schema, '')};\nexport type ${name} = Static<typeof ${name}>;`);
    }
  }
  return out;
}

// Each operation's JSON responses by status, named <OperationId>Responses: the route's
// `schema.response`, so a status added to the contract cannot be missing from its route.
function responseMaps(doc: OpenApi): string[] {
  const out: string[] = [];
  for (const methods of Object.values(doc.paths)) {
    for (const op of Object.values(methods)) {
      const entries = Object.entries(op.responses)
        .map(([status, r]) => [status, r.content?.['application/json']?.schema] as const)
        .filter((e): e is readonly [string, JsonSchema] => e[1] !== undefined);
      if (entries.length === 0) continue;
      const body = entries.map(([status, schema]) => `  ${status}: ${render(schema, '  ')},`).join('\n');
      out.push(`export const ${pascal(op.operationId)}Responses = {\n${body}\n};`);
    }
  }
  return out;
}

export function renderSchemas(doc: OpenApi): string {
  const header = [
    '// GENERATED by scripts/gen-schemas.ts from openapi.json. Do not edit: run `npm run gen`.',
    "import { Type, type Static } from '@sinclair/typebox';",
  ];
  const components = ordered(doc.components.schemas).map((name) => {
    const code = render(doc.components.schemas[name]!, '');
    return `export const ${name} = ${code};\nexport type ${name} = Static<typeof ${name}>;`;
  });
  return [...header, '', ...[...components, ...parameterSchemas(doc), ...responseMaps(doc)].join('\n\n').split('\n'), ''].join('\n');
}

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const OPENAPI_PATH = path.join(ROOT, 'openapi.json');
export const GENERATED_PATH = path.join(ROOT, 'src', 'generated', 'schemas.ts');

export function generate(): string {
  return renderSchemas(JSON.parse(readFileSync(OPENAPI_PATH, 'utf8')) as OpenApi);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  writeFileSync(GENERATED_PATH, generate());
  console.log(`wrote ${path.relative(ROOT, GENERATED_PATH)}`);
}
