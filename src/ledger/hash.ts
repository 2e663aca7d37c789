// SHA-256 for the ledger's encoding (src/ledger-format), with Node's one-shot native hash.
import { hash } from 'node:crypto';
import type { Sha256 } from '../ledger-format/encoding.js';

export const sha256: Sha256 = (data) => hash('sha256', data, 'buffer');
