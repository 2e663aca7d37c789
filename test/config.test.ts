// Configuration: the variables an operator sets (README's table) and the advanced ones
// (docs/operations.md) are exactly those loadConfig reads; TRUST_PROXY trusts named proxies
// only, and the values that once trusted whatever a client wrote stop the server with what to
// set instead; the pooler's variables are checked.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ADVANCED_CONFIG_DOC, CONFIG_DOC, ConfigError, loadConfig } from '../src/config.js';
import { ROOT, runCli } from './helpers/process.js';

const problemsOf = (env: Record<string, string>): string[] => {
  try {
    loadConfig(env);
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
};

/** The variable names in the first column of the markdown table under `heading`. */
function tableUnder(file: string, heading: string): string[] {
  const text = readFileSync(path.join(ROOT, file), 'utf8');
  const at = text.indexOf(`\n${heading}\n`);
  expect(at, `${file} has a section "${heading}"`).toBeGreaterThan(-1);
  const names: string[] = [];
  let inTable = false;
  for (const line of text.slice(at + heading.length + 2).split('\n')) {
    if (line.startsWith('|')) inTable = true;
    else if (inTable) break;
    const m = /^\| `([A-Z_]+)` \|/.exec(line);
    if (m) names.push(m[1]!);
  }
  return names;
}

describe('configuration', () => {
  it("documents every variable it reads, once: the operator's in the README, the advanced ones in docs/operations.md", () => {
    const read = new Set<string>();
    loadConfig(new Proxy({}, { get: (_t, name) => (typeof name === 'string' && read.add(name), undefined) }));
    const operator = CONFIG_DOC.map(([n]) => n);
    const advanced = ADVANCED_CONFIG_DOC.map(([n]) => n);
    expect(new Set([...operator, ...advanced]).size).toBe(operator.length + advanced.length);
    expect([...read].sort()).toEqual([...operator, ...advanced].sort());
    expect(tableUnder('README.md', '## Configuration')).toEqual(operator);
    expect(tableUnder('docs/operations.md', '## Advanced settings')).toEqual(advanced);
    // The README's pointer to them says how many there are.
    const counted = /thresholds \((\d+) more, with\s+measured defaults\)/.exec(readFileSync(path.join(ROOT, 'README.md'), 'utf8'));
    expect(Number(counted?.[1])).toBe(advanced.length);
    // Fits on a screen (other variables may join it, but not the thresholds).
    expect(operator.length).toBeLessThanOrEqual(20);
  });

  it('names a variable that looks like a misspelt setting, and no other', () => {
    const config = loadConfig({
      DATABSE_URL: 'postgresql://x',
      BODY_LIMT: '5MiB',
      VERIFY_SHAR: '0.1',
      HOME: '/root',
      HOSTNAME: 'box',
      PATH: '/bin',
      NODE_ENV: 'production',
      TEST_DATABASE_URL: 'postgresql://y',
      BODY_LIMIT: '2MiB',
    });
    expect(config.warnings).toEqual([
      'DATABSE_URL is not a setting (did you mean DATABASE_URL?): it is ignored',
      'BODY_LIMT is not a setting (did you mean BODY_LIMIT?): it is ignored',
      'VERIFY_SHAR is not a setting (did you mean VERIFY_SHARE?): it is ignored',
    ]);
    expect(loadConfig({ PORT: '8001' }).warnings).toEqual([]);
  });

  it("TRUST_PROXY: off by default, else the proxies' addresses, networks or names", () => {
    expect(loadConfig({}).trustProxy).toBe(false);
    expect(loadConfig({ TRUST_PROXY: 'false' }).trustProxy).toBe(false);
    expect(loadConfig({ TRUST_PROXY: '0' }).trustProxy).toBe(false);
    expect(loadConfig({ TRUST_PROXY: '127.0.0.1' }).trustProxy).toEqual(['127.0.0.1']);
    expect(loadConfig({ TRUST_PROXY: ' 10.0.0.0/8, fd00::/8,192.168.1.0/255.255.255.0 , loopback' }).trustProxy).toEqual([
      '10.0.0.0/8',
      'fd00::/8',
      '192.168.1.0/255.255.255.0',
      'loopback',
    ]);
  });

  it('TRUST_PROXY=true (or a hop count) stops the server with what to set instead; nonsense is named', () => {
    for (const value of ['true', 'yes', 'on', 'TRUE']) {
      const [problem] = problemsOf({ TRUST_PROXY: value });
      expect(problem).toMatch(
        /no longer accepted.*X-Forwarded-For.*set TRUST_PROXY to the addresses or networks of your proxies, e\.g\. TRUST_PROXY=127\.0\.0\.1/,
      );
    }
    expect(problemsOf({ TRUST_PROXY: '2' })[0]).toMatch(/a number of proxies cannot tell a proxy from a client/);
    expect(problemsOf({ TRUST_PROXY: '10.0.0.0/33,proxy.internal,1.2.3.4/8/8' })[0]).toMatch(
      /"10\.0\.0\.0\/33", "proxy\.internal", "1\.2\.3\.4\/8\/8" is not an address/,
    );
  });

  it('QUOTA_RESERVE_TOKENS is at least 1: it is also the most a job without max_output is charged', () => {
    expect(loadConfig({ QUOTA_RESERVE_TOKENS: '1' }).coordinator.quotaReserveTokens).toBe(1);
    expect(problemsOf({ QUOTA_RESERVE_TOKENS: '0' })).toEqual(['QUOTA_RESERVE_TOKENS="0": expected a whole number from 1 to 1000000000']);
  });

  it('BODY_LIMIT: a size up to 1GiB, in the units the message names (kb, mb and gb powers of 1000)', () => {
    expect(loadConfig({ BODY_LIMIT: '1GiB' }).bodyLimit).toBe(1024 ** 3);
    expect(loadConfig({ BODY_LIMIT: '2kb' }).bodyLimit).toBe(2000);
    expect(loadConfig({ BODY_LIMIT: '1mb' }).bodyLimit).toBe(1_000_000);
    expect(problemsOf({ BODY_LIMIT: '1kb' })).toEqual([
      'BODY_LIMIT="1kb": expected a size from 1KiB to 1GiB, e.g. 1048576 or 1MiB (units b, kb, KiB, mb, MiB, gb, GiB; kb, mb and gb are powers of 1000)',
    ]);
    expect(problemsOf({ BODY_LIMIT: '2GiB' })).toHaveLength(1);
  });

  it('DATABASE_POOLER and DATABASE_DIRECT_URL', () => {
    expect(loadConfig({}).databasePooler).toBe('auto');
    expect(
      loadConfig({ DATABASE_URL: 'postgresql://p:6432/ins', DATABASE_DIRECT_URL: 'postgresql://db:5432/ins', DATABASE_POOLER: 'Transaction' }),
    ).toMatchObject({ databasePooler: 'transaction', databaseDirectUrl: 'postgresql://db:5432/ins' });
    expect(problemsOf({ DATABASE_POOLER: 'session' })).toEqual(['DATABASE_POOLER="session": expected auto, transaction or none']);
    expect(problemsOf({ DATABASE_DIRECT_URL: 'postgresql://db/ins' })).toEqual([
      'DATABASE_DIRECT_URL is set without DATABASE_URL: it is the direct way to the same PostgreSQL database',
    ]);
    expect(problemsOf({ DATABASE_URL: 'postgresql://p/ins', DATABASE_DIRECT_URL: 'mysql://db/ins' })).toEqual([
      'DATABASE_DIRECT_URL: expected a postgres:// or postgresql:// URL',
    ]);
  });

  it('VERIFY_AUDIT_DELAY: 250 ms by default, a duration up to a minute, 0 for at once; an error offers examples in range', () => {
    expect(loadConfig({}).verify.auditDelay).toBe(0.25);
    expect(loadConfig({ VERIFY_AUDIT_DELAY: '20ms' }).verify.auditDelay).toBeCloseTo(0.02, 9);
    expect(loadConfig({ VERIFY_AUDIT_DELAY: '0' }).verify.auditDelay).toBe(0);
    // The examples are durations it would take.
    expect(problemsOf({ VERIFY_AUDIT_DELAY: '2m' })).toEqual([
      'VERIFY_AUDIT_DELAY="2m": expected a duration from 1 ms to 60 s or 0, e.g. 250ms or 30s',
    ]);
    expect(problemsOf({ VERIFY_EVIDENCE_WINDOW: '10s' })).toEqual([
      'VERIFY_EVIDENCE_WINDOW="10s": expected a duration from 60 s to 31536000 s, e.g. 5m, 6h or 7d',
    ]);
    expect(problemsOf({ VERIFY_AUDIT_DELAY: 'soon' })[0]).toMatch(/^VERIFY_AUDIT_DELAY="soon": expected a duration/);
  });

  it('ins serve with TRUST_PROXY=true exits 1 before listening, saying what to set', async () => {
    const r = await runCli(['serve'], { TRUST_PROXY: 'true', PORT: '0' });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/- TRUST_PROXY=true: no longer accepted/);
    expect(r.stdout).not.toMatch(/listening/);
  });
});
