// While `ins serve` holds the embedded database, other `ins` commands cannot open it (PGlite is
// one process). The server therefore listens on DATA_DIR/admin.sock — a Unix socket only the
// data directory's owner can use (mode 0600) — and runs forwarded commands on its own open
// database, so `ins node add` works while the server runs. One JSON line each way.
import { chmodSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Database } from '../db/database.js';
import type { Lifecycle } from '../jobs/lifecycle.js';
import type { Config } from '../config.js';
import { runCommand } from './commands.js';
import { adminSocketPath } from './forward.js';
import { bufferIo } from './io.js';

export { adminSocketPath, forwardToServer, type Forwarded } from './forward.js';
const MAX_REQUEST = 64 * 1024;

export async function serveAdminSocket(db: Database, config: Config, jobs: Lifecycle, onError: (err: unknown) => void): Promise<() => Promise<void>> {
  const file = adminSocketPath(config.dataDir);
  // We hold the data-directory lock, so any socket file left here is from a dead process.
  rmSync(file, { force: true });
  const server = net.createServer((conn) => {
    let buf = '';
    conn.setEncoding('utf8');
    conn.setTimeout(30_000, () => conn.destroy());
    conn.on('error', () => {});
    conn.on('data', (chunk: string) => {
      buf += chunk;
      if (buf.length > MAX_REQUEST) return conn.destroy();
      const nl = buf.indexOf('\n');
      if (nl < 0) return;
      (async () => {
        const io = bufferIo();
        let code = 1;
        try {
          const { argv, cwd } = JSON.parse(buf.slice(0, nl)) as { argv: unknown; cwd: unknown };
          if (!Array.isArray(argv) || !argv.every((a) => typeof a === 'string')) throw new Error('bad request');
          if (cwd !== undefined && (typeof cwd !== 'string' || !path.isAbsolute(cwd))) throw new Error('bad request');
          code = await runCommand(db, argv, io, {
            coordinator: config.coordinator,
            verify: config.verify,
            ledgerKeyFile: config.ledgerKeyFile,
            jobs,
            ...(cwd ? { cwd } : {}),
          });
        } catch (err) {
          onError(err);
          io.err('ins: the server could not run this command; see its log');
        }
        conn.end(`${JSON.stringify({ code, stdout: io.stdout, stderr: io.stderr })}\n`);
      })().catch(onError);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(file, () => resolve());
  });
  chmodSync(file, 0o600);
  return () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      rmSync(file, { force: true });
    });
}
