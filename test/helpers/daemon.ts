// A server program of Debian's (nginx, PgBouncer) run by a test: started, waited for until it
// accepts connections on its port, stopped with SIGTERM, and killed with the test process if a
// hook times out before stop().
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { connect } from 'node:net';
import { until } from './wait.js';

export interface Daemon {
  logs(): string;
  stop(): Promise<void>;
}

/** Runs `program args`; resolves once 127.0.0.1:`port` accepts connections. stop() also removes `dir`. */
export async function startDaemon(name: string, program: string, args: string[], port: number, dir: string): Promise<Daemon> {
  const child = spawn(program, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let logs = '';
  child.stdout.on('data', (d: Buffer) => (logs += d.toString()));
  child.stderr.on('data', (d: Buffer) => (logs += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const orphan = () => child.kill('SIGKILL');
  process.once('exit', orphan);
  await until(
    `${name} to listen on ${port}`,
    () => {
      if (child.exitCode !== null) throw new Error(`${name} exited:\n${logs}`);
      return new Promise<boolean>((resolve) => {
        const s = connect(port, '127.0.0.1', () => {
          s.end();
          resolve(true);
        });
        s.on('error', () => resolve(false));
      });
    },
    15_000,
    async () => `\n${logs}`,
  );
  return {
    logs: () => logs,
    async stop() {
      process.off('exit', orphan);
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
