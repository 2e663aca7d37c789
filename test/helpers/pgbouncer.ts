// Debian's PgBouncer for tests, started on a free port in front of the test PostgreSQL
// (TEST_DATABASE_URL), with the settings of deploy/pgbouncer/pgbouncer.ini (transaction
// pooling) but this machine's addresses: every database of that server under its own name,
// trust authentication (the test server trusts local connections anyway).
import { existsSync, mkdtempSync, readFileSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startDaemon } from './daemon.js';
import { freePort, ROOT } from './process.js';

export const PGBOUNCER = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((p) => existsSync(p));

export interface PgBouncer {
  /** The URL of database `name` through PgBouncer (the user of TEST_DATABASE_URL). */
  url(name: string): string;
  port: number;
  logs(): string;
  stop(): Promise<void>;
}

/** deploy/pgbouncer/pgbouncer.ini's [pgbouncer] settings. */
function deploySettings(): Map<string, string> {
  const out = new Map<string, string>();
  let section = '';
  for (const raw of readFileSync(path.join(ROOT, 'deploy', 'pgbouncer', 'pgbouncer.ini'), 'utf8').split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith(';') || line.startsWith('#')) continue;
    const header = /^\[(\w+)\]$/.exec(line);
    if (header) section = header[1]!;
    else if (section === 'pgbouncer') {
      const at = line.indexOf('=');
      out.set(line.slice(0, at).trim(), line.slice(at + 1).trim());
    }
  }
  return out;
}

/** Starts PgBouncer; `overrides` change or add [pgbouncer] settings. Resolves once it accepts connections. */
export async function startPgBouncer(databaseUrl: string, overrides: Record<string, string> = {}): Promise<PgBouncer> {
  if (!PGBOUNCER) throw new Error('pgbouncer is not installed (Debian: apt-get install pgbouncer)');
  const server = new URL(databaseUrl);
  const user = decodeURIComponent(server.username || 'postgres');
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), 'ins-pgbouncer-'));
  // PgBouncer refuses to run as root: it drops to `nobody`, who must read these files.
  chmodSync(dir, 0o755);
  const settings = deploySettings();
  for (const [k, v] of Object.entries({
    listen_addr: '127.0.0.1',
    listen_port: String(port),
    unix_socket_dir: '',
    auth_type: 'trust',
    auth_file: path.join(dir, 'userlist.txt'),
    logfile: '',
    pidfile: '',
    syslog: '0',
    ...overrides,
  }))
    settings.set(k, v);
  writeFileSync(path.join(dir, 'userlist.txt'), `"${user}" ""\n`, { mode: 0o644 });
  const ini = [
    '[databases]',
    `* = host=${server.hostname} port=${server.port || 5432}`,
    '',
    '[pgbouncer]',
    ...[...settings].map(([k, v]) => `${k} = ${v}`),
    '',
  ].join('\n');
  writeFileSync(path.join(dir, 'pgbouncer.ini'), ini, { mode: 0o644 });

  const asRoot = process.getuid?.() === 0;
  const daemon = await startDaemon('pgbouncer', PGBOUNCER, [...(asRoot ? ['-u', 'nobody'] : []), path.join(dir, 'pgbouncer.ini')], port, dir);
  return {
    port,
    url(name: string) {
      const u = new URL(databaseUrl);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      u.pathname = `/${name}`;
      return u.toString();
    },
    logs: daemon.logs,
    stop: daemon.stop,
  };
}
