// `ins import nodes FILE.csv`: nodes with their existing keys, as name,api_key (hashed here,
// never stored) or name,api_key_sha256 (the hex SHA-256 of the key). Keys keep working as
// they are, whatever their format.
import type { Queryable } from '../db/database.js';
import { IMPORT } from '../nodes/sql/add.js';
import { hashKey } from '../keys.js';
import { isUnstorable, NUL_ERROR } from '../validation/pydantic.js';
import type { ImportSpec } from './run.js';

function checkRow(f: Record<string, string>): string[] | string {
  const name = f.name ?? '';
  if (isUnstorable(name)) return NUL_ERROR;
  const length = [...name].length;
  if (length < 1 || length > 128) return 'name must be 1 to 128 characters';
  if (f.api_key !== undefined) {
    if (f.api_key.length === 0) return 'api_key is empty';
    return [name, hashKey(f.api_key)];
  }
  const sha = f.api_key_sha256 ?? '';
  if (!/^[0-9a-fA-F]{64}$/.test(sha)) return 'api_key_sha256 must be 64 hexadecimal characters';
  return [name, sha.toLowerCase()];
}

// The nodes are added by the node lifecycle's statement (nodes/sql/add.ts), announced in the import's transaction.
async function apply(tx: Queryable): Promise<number> {
  const [row] = await tx.query<{ n: number }>(IMPORT);
  return row!.n;
}

export const nodesImport: ImportSpec = {
  kind: 'nodes',
  staging: 'import_nodes',
  columns: [
    ['name', 'text'],
    ['key_hash', 'text'],
  ],
  headers: [
    ['name', 'api_key'],
    ['name', 'api_key_sha256'],
  ],
  optional: [],
  check: (fields) => checkRow(fields),
  databaseChecks: `
    SELECT s.line, 'node "' || s.name || '" already exists' AS reason
      FROM import_nodes s WHERE EXISTS (SELECT 1 FROM nodes n WHERE n.name = s.name)
    UNION ALL
    SELECT s.line, 'this key already belongs to another node'
      FROM import_nodes s WHERE EXISTS (SELECT 1 FROM nodes n WHERE n.key_hash = s.key_hash)
    UNION ALL
    SELECT x.line, 'node "' || x.name || '" repeats line ' || x.first
      FROM (SELECT line, name, min(line) OVER (PARTITION BY name) AS first FROM import_nodes) x WHERE x.line > x.first
    UNION ALL
    SELECT x.line, 'the key repeats line ' || x.first
      FROM (SELECT line, key_hash, min(line) OVER (PARTITION BY key_hash) AS first FROM import_nodes) x WHERE x.line > x.first`,
  apply,
};
