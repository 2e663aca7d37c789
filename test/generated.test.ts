// The TypeBox schemas are generated from openapi.json; this fails when someone edits one
// without the other (fix: npm run gen).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { GENERATED_PATH, generate, renderSchemas } from '../scripts/gen-schemas.js';

describe('generated schemas', () => {
  it('match what the generator produces from openapi.json now', () => {
    expect(readFileSync(GENERATED_PATH, 'utf8')).toBe(generate());
  });

  it('reject schema keywords the generator does not understand', () => {
    const doc = { paths: {}, components: { schemas: { X: { type: 'string', pattern: '^a' } } } };
    expect(() => renderSchemas(doc as never)).toThrow(/unsupported keywords: pattern/);
  });
});
