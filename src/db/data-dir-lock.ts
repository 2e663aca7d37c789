// One process at a time may open the embedded database: PGlite is not multi-process, and two
// writers would corrupt the data directory. The holder's pid is kept in DATA_DIR/ins.lock; a
// lock whose process is gone (e.g. after SIGKILL) is stale and taken over.
import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import path from 'node:path';

export class DataDirBusyError extends Error {
  constructor(
    readonly dataDir: string,
    readonly pid: number,
    readonly purpose: string,
  ) {
    super(`the embedded database in ${dataDir} is in use by process ${pid} (${purpose})`);
  }
}

/** An open given up while it waited for the directory's holder to finish (db/open.ts, a stop signal). */
export class StartAborted extends Error {}

function alive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export const lockPath = (dataDir: string): string => path.join(dataDir, 'ins.lock');

/** Takes the lock or throws DataDirBusyError; returns the release function. */
export function lockDataDir(dataDir: string, purpose: string): () => void {
  const file = lockPath(dataDir);
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = openSync(file, 'wx', 0o600);
      writeSync(fd, JSON.stringify({ pid: process.pid, purpose, since: new Date().toISOString() }));
      closeSync(fd);
      return () => rmSync(file, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let holder: { pid?: number; purpose?: string } = {};
      try {
        holder = JSON.parse(readFileSync(file, 'utf8')) as typeof holder;
      } catch {
        // Unreadable or half-written: treated as stale below.
      }
      if (alive(Number(holder.pid))) throw new DataDirBusyError(dataDir, Number(holder.pid), holder.purpose ?? 'unknown');
      rmSync(file, { force: true });
    }
  }
  throw new Error(`could not take the lock ${file}`);
}
