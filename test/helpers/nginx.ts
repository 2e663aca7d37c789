// Debian's nginx for tests, started on a free port with deploy/nginx/ins.conf — the same file
// deploy/compose.yaml runs — with only its addresses changed: the upstream servers and the
// port it listens on. Skipped by the tests where nginx is not installed.
import { existsSync, mkdtempSync, readFileSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startDaemon } from './daemon.js';
import { freePort, ROOT } from './process.js';

export const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));

export interface Nginx {
  url: string;
  port: number;
  logs(): string;
  stop(): Promise<void>;
}

/** deploy/nginx/ins.conf in front of `servers` (host:port each), listening on 127.0.0.1. */
export async function startNginx(servers: string[]): Promise<Nginx> {
  if (!NGINX) throw new Error('nginx is not installed (Debian: apt-get install nginx)');
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), 'ins-nginx-'));
  chmodSync(dir, 0o755);
  const deployed = readFileSync(path.join(ROOT, 'deploy', 'nginx', 'ins.conf'), 'utf8');
  const upstreams = deployed.match(/^\s*server ins-\d+:8000;$/gm) ?? [];
  if (upstreams.length !== servers.length || !/^\s*listen 80;$/m.test(deployed)) {
    throw new Error(`deploy/nginx/ins.conf: expected ${servers.length} "server ins-N:8000;" lines and "listen 80;"`);
  }
  let n = 0;
  const site = deployed
    .replace(/^(\s*)server ins-\d+:8000;$/gm, (_m, indent: string) => `${indent}server ${servers[n++]};`)
    .replace(/^(\s*)listen 80;$/m, `$1listen 127.0.0.1:${port};`);
  writeFileSync(path.join(dir, 'ins.conf'), site);
  // What deploy/nginx/nginx.conf sets for a container, here for a process of the test.
  writeFileSync(
    path.join(dir, 'nginx.conf'),
    [
      'worker_processes 1;',
      'daemon off;',
      `pid ${dir}/nginx.pid;`,
      'error_log stderr warn;',
      'events { worker_connections 1024; }',
      'http {',
      '  access_log off;',
      ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((t) => `  ${t}_temp_path ${dir}/${t};`),
      `  include ${dir}/ins.conf;`,
      '}',
      '',
    ].join('\n'),
  );
  // SIGTERM on stop: nginx's fast shutdown, which does not wait for long polls still open.
  const daemon = await startDaemon('nginx', NGINX, ['-p', dir, '-c', path.join(dir, 'nginx.conf')], port, dir);
  return { url: `http://127.0.0.1:${port}`, port, logs: daemon.logs, stop: daemon.stop };
}
