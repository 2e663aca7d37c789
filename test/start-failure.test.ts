// The sentences `ins serve` logs when the environment stops it from starting (src/cli/start-failure.ts):
// each names the setting to change; anything else is left to the stack trace.
import { describe, expect, it } from 'vitest';
import { startFailure } from '../src/cli/start-failure.js';

const fail = (message: string, fields: Record<string, unknown>): Error => Object.assign(new Error(message), fields);
const embedded = { host: '0.0.0.0', port: 8000, databaseUrl: undefined, dataDir: '/srv/ins' };
const postgres = { ...embedded, databaseUrl: 'postgresql://ins:secret@db:5432/ins' };

describe('why ins serve could not start', () => {
  it('names HOST, PORT, DATABASE_URL or DATA_DIR, and never the database URL itself', () => {
    expect(startFailure(fail('getaddrinfo ENOTFOUND nohost', { code: 'ENOTFOUND', hostname: 'nohost' }), { ...embedded, host: 'nohost' })).toMatch(
      /^HOST=nohost is not an address of this machine/,
    );
    expect(startFailure(fail('listen EADDRNOTAVAIL', { code: 'EADDRNOTAVAIL', syscall: 'listen' }), { ...embedded, host: '10.9.9.9' })).toMatch(
      /^HOST=10\.9\.9\.9/,
    );
    expect(
      startFailure(fail('listen EACCES: permission denied 0.0.0.0:80', { code: 'EACCES', syscall: 'listen' }), { ...embedded, port: 80 }),
    ).toMatch(/^port 80 needs privileges/);
    // A wrong or missing password, directly and through PgBouncer's SCRAM (the messages pg gives: an outside probe).
    for (const [message, code] of [
      ['password authentication failed for user "ins"', '28P01'],
      ['SASL authentication failed', '08P01'],
      ['SASL: SCRAM-SERVER-FIRST-MESSAGE: client password must be a string', undefined],
    ]) {
      const said = startFailure(fail(message!, code ? { code } : {}), postgres);
      expect(said, message).toMatch(/^cannot log in to the PostgreSQL database of DATABASE_URL .*check the user name and password in DATABASE_URL$/);
      expect(said).not.toContain('secret');
    }
    for (const [message, code] of [
      ['connect ECONNREFUSED 10.0.0.5:5432', 'ECONNREFUSED'],
      ['getaddrinfo ENOTFOUND db', 'ENOTFOUND'],
      ['database "ins" does not exist', '3D000'],
      ['role "ins" does not exist', '28000'],
    ]) {
      const said = startFailure(fail(message!, { code }), postgres);
      expect(said).toMatch(/^cannot use the PostgreSQL database of DATABASE_URL/);
      expect(said).not.toContain('secret');
    }
    expect(startFailure(fail("EACCES: permission denied, mkdir '/srv/ins'", { code: 'EACCES', syscall: 'mkdir' }), embedded)).toMatch(
      /^cannot use DATA_DIR=\/srv\/ins/,
    );
  });

  it('leaves anything else to the stack trace', () => {
    expect(startFailure(new TypeError('x is not a function'), embedded)).toBeUndefined();
    expect(startFailure(fail('syntax error at or near "x"', { code: '42601' }), postgres)).toBeUndefined();
    expect(startFailure('a string', embedded)).toBeUndefined();
    // A file error on PostgreSQL is not DATA_DIR's.
    expect(startFailure(fail('EACCES', { code: 'EACCES', syscall: 'open' }), postgres)).toBeUndefined();
  });
});
