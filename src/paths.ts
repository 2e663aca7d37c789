// Where the files that ship beside the code live (migrations/, openapi.json, web/dist/): the
// package's root, one level above this file in src/ and in the built dist/ alike.
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const PACKAGE_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
