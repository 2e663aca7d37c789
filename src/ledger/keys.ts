// The ledger's Ed25519 signing key (node:crypto): generated on first start into the database,
// or kept by the operator in LEDGER_KEY_FILE (PEM, PKCS #8) — in which case only its public
// half is recorded in the database. One ledger has one key: a server whose key file holds
// another key than the one recorded refuses to start instead of signing a second chain.
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { sql, type Database } from '../db/database.js';
import { toHex } from '../ledger-format/encoding.js';
import { sha256 } from './hash.js';

export interface LedgerKey {
  /** Hex of the first 8 bytes of SHA-256(raw public key). */
  keyId: string;
  /** The raw 32-byte public key, base64. */
  publicKey: string;
  publicPem: string;
  /** Absent when the private key lives in another server's key file: this one cannot sign. */
  sign?: (message: Uint8Array) => Buffer;
}

export class LedgerKeyError extends Error {}

const GET = sql('ledger_key_get', `SELECT key_id, encode(public_key, 'base64') AS public_key, private_pem FROM ledger_key`);
const PUT = sql(
  'ledger_key_put',
  `INSERT INTO ledger_key (key_id, public_key, private_pem) VALUES ($1::text, decode($2::text, 'base64'), $3::text)
  ON CONFLICT (only_row) DO NOTHING`,
);

const rawPublic = (key: KeyObject): Buffer => Buffer.from(key.export({ format: 'jwk' }).x!, 'base64url');
export const keyIdOf = (raw: Uint8Array): string => toHex(sha256(raw).subarray(0, 8));

function ledgerKey(publicKey: KeyObject, privateKey?: KeyObject): LedgerKey {
  const raw = rawPublic(publicKey);
  return {
    keyId: keyIdOf(raw),
    publicKey: raw.toString('base64'),
    publicPem: publicKey.export({ format: 'pem', type: 'spki' }).toString(),
    ...(privateKey ? { sign: (m: Uint8Array) => sign(null, m, privateKey) } : {}),
  };
}

function readOrCreateKeyFile(file: string): KeyObject {
  try {
    return createPrivateKey(readFileSync(file, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
      throw new LedgerKeyError(`LEDGER_KEY_FILE ${file}: ${(err as Error).message} (expected an Ed25519 private key, PEM)`);
  }
  const { privateKey } = generateKeyPairSync('ed25519');
  try {
    writeFileSync(file, privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600, flag: 'wx' });
  } catch (err) {
    // Another server created it at the same moment: use theirs.
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return createPrivateKey(readFileSync(file, 'utf8'));
    throw new LedgerKeyError(`LEDGER_KEY_FILE ${file}: cannot create it: ${(err as Error).message}`);
  }
  return privateKey;
}

/** The ledger's key: from keyFile, else from the database (made there on first start). */
export async function loadLedgerKey(db: Database, keyFile?: string): Promise<LedgerKey> {
  let fileKey: KeyObject | undefined;
  if (keyFile) {
    fileKey = readOrCreateKeyFile(keyFile);
    if (fileKey.asymmetricKeyType !== 'ed25519')
      throw new LedgerKeyError(`LEDGER_KEY_FILE ${keyFile}: an ${fileKey.asymmetricKeyType} key, expected Ed25519`);
  }
  const [known] = await db.query<{ key_id: string; public_key: string; private_pem: string | null }>(GET);
  if (!known) {
    const privateKey = fileKey ?? generateKeyPairSync('ed25519').privateKey;
    const mine = ledgerKey(createPublicKey(privateKey), privateKey);
    await db.query(PUT, [mine.keyId, mine.publicKey, fileKey ? null : privateKey.export({ format: 'pem', type: 'pkcs8' }).toString()]);
    // Two servers starting together: the first row wins, and both use it.
    return loadLedgerKey(db, keyFile);
  }
  if (fileKey) {
    const mine = ledgerKey(createPublicKey(fileKey), fileKey);
    if (mine.publicKey !== known.public_key) {
      throw new LedgerKeyError(
        `LEDGER_KEY_FILE ${keyFile} holds key ${mine.keyId}, but this ledger is signed with key ${known.key_id}: give every server the same key file`,
      );
    }
    return mine;
  }
  const publicKey = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(known.public_key, 'base64').toString('base64url') },
    format: 'jwk',
  });
  return ledgerKey(publicKey, known.private_pem ? createPrivateKey(known.private_pem) : undefined);
}

/**
 * The key, loaded once and on demand: a server starts while its database is away (and answers
 * 503), so a failure to read the key is retried at the next need; only a key file that is not
 * the ledger's (LedgerKeyError) is final.
 */
export class LedgerKeys {
  private loading: Promise<LedgerKey> | undefined;

  constructor(
    private readonly db: Database,
    private readonly keyFile?: string,
  ) {}

  get(): Promise<LedgerKey> {
    this.loading ??= loadLedgerKey(this.db, this.keyFile).catch((err: unknown) => {
      if (!(err instanceof LedgerKeyError)) this.loading = undefined;
      throw err;
    });
    return this.loading;
  }
}

/** Checks an Ed25519 signature against a raw public key (base64). */
export function verifySignature(publicKeyBase64: string, message: Uint8Array, signature: Uint8Array): boolean {
  const key = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(publicKeyBase64, 'base64').toString('base64url') },
    format: 'jwk',
  });
  return verify(null, message, key, signature);
}
