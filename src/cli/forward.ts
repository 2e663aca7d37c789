// The client side of the admin socket (admin-socket.ts): sends a command's argv to the server
// that holds the embedded database. Kept apart, with nothing but node:net, so a forwarded
// command loads none of the commands, the database drivers or the server (`ins` answers in a
// blink while the server runs: docs/benchmarks.md, "ins start-up").
import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

export interface Forwarded {
  code: number;
  stdout: string[];
  stderr: string[];
}

export const adminSocketPath = (dataDir: string): string => path.join(dataDir, 'admin.sock');

/**
 * Sends argv to the running server; undefined when no server answers on the socket. `cwd` is
 * the caller's working directory: the server reads a relative FILE of `ins import` from there.
 */
export function forwardToServer(dataDir: string, argv: string[], cwd = process.cwd()): Promise<Forwarded | undefined> {
  const file = adminSocketPath(dataDir);
  if (!existsSync(file)) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    const conn = net.createConnection(file);
    let buf = '';
    conn.setEncoding('utf8');
    conn.setTimeout(60_000, () => conn.destroy());
    conn.on('connect', () => conn.write(`${JSON.stringify({ argv, cwd })}\n`));
    conn.on('data', (c: string) => (buf += c));
    conn.on('error', () => resolve(undefined));
    conn.on('close', () => {
      try {
        resolve(JSON.parse(buf) as Forwarded);
      } catch {
        resolve(undefined);
      }
    });
  });
}
