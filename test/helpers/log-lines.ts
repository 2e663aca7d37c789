// The app's log as a test reads it: a pino logger whose every line, parsed, lands in an array.
import { Writable } from 'node:stream';
import pino from 'pino';

/** A logger at `level` that pushes each line it writes, parsed, onto `lines`. */
export function loggerInto<T>(lines: T[], level: pino.LevelWithSilent = 'info') {
  return pino(
    { level },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(JSON.parse(String(chunk)) as T);
        done();
      },
    }),
  );
}
