// The README is a map and docs/ holds the rest: this keeps the map true. Every relative link in
// README.md and docs/*.md reaches a file of the repository and, when it names one, a heading of
// that file (GitHub's anchors); every file path a page names in backticks exists; every
// environment variable the server reads (src/config*.ts) and every one `ins worker` reads
// (src/worker/options.ts) is documented somewhere in them.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { ROOT } from './helpers/process.js';

const PAGES = [
  'README.md',
  ...readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
const SRC = path.join(ROOT, 'src');
const SOURCE_DIRS = [
  SRC,
  ...readdirSync(SRC, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => path.join(SRC, d.name)),
];
const read = (file: string): string => readFileSync(path.join(ROOT, file), 'utf8');

/** The text outside fenced code blocks, line by line (a `#` in a shell block is no heading). */
function prose(text: string): string[] {
  let fenced = false;
  return text.split('\n').filter((line) => {
    if (/^\s*(```|~~~)/.test(line)) {
      fenced = !fenced;
      return false;
    }
    return !fenced;
  });
}

/** GitHub's anchor of a heading (github-slugger): lower case, punctuation dropped, spaces to hyphens; repeats get -1, -2… */
function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of prose(read(file))) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = m[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Relative links `[text](target)` outside code: the page, the target as written. */
function links(): { page: string; target: string }[] {
  const out: { page: string; target: string }[] = [];
  for (const page of PAGES) {
    for (const line of prose(read(page))) {
      // Inline code spans are not links.
      for (const m of line.replace(/`[^`]*`/g, (s) => (s.includes('](') ? '' : s)).matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1]!;
        if (!/^[a-z][a-z0-9+.-]*:/i.test(target)) out.push({ page, target });
      }
    }
  }
  return out;
}

describe('documentation', () => {
  it('has the pages the README links to, and the README stays a map', () => {
    expect(PAGES).toContain('docs/benchmarks.md');
    // A map: about 250 lines, with room for a table or two, not for the reference again.
    expect(read('README.md').split('\n').length).toBeLessThanOrEqual(350);
  });

  it('every relative link reaches an existing file and heading', () => {
    const all = links();
    expect(all.length).toBeGreaterThan(20);
    const broken: string[] = [];
    for (const { page, target } of all) {
      const [file, anchor] = target.split('#') as [string, string | undefined];
      const resolved = file === '' ? page : path.posix.normalize(path.posix.join(path.posix.dirname(page), file));
      if (resolved.startsWith('..') || !existsSync(path.join(ROOT, resolved))) {
        broken.push(`${page}: ${target} (no file ${resolved})`);
        continue;
      }
      if (anchor !== undefined && !(resolved.endsWith('.md') && anchors(resolved).has(decodeURIComponent(anchor)))) {
        broken.push(`${page}: ${target} (no heading #${anchor} in ${resolved})`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('every file path named in backticks exists', () => {
    const missing: string[] = [];
    const tops = /^(src|test|bench|scripts|deploy|migrations|docs|web|bin)\//;
    for (const page of PAGES) {
      for (const line of prose(read(page))) {
        for (const m of line.matchAll(/`([^`\s]+)`/g)) {
          const p = m[1]!.replace(/[.,:;)]+$/, '');
          // Placeholders, and what the build and the runs write (git ignores it: .gitignore).
          if (/[*<>…{}]|NNNN/.test(p) || /^(web\/)?dist\/|^bench-results\/|^test-artifacts\//.test(p)) continue;
          // A path from the root, or a module named from src/ or from one of its parts
          // (`jobs/sql/complete.ts`, `sql/lease.ts` on the coordinator's page).
          if (
            tops.test(p)
              ? existsSync(path.join(ROOT, p))
              : !/^[\w-]+(\/[\w.-]+)+\.ts$/.test(p) || SOURCE_DIRS.some((dir) => existsSync(path.join(dir, p)))
          )
            continue;
          missing.push(`${page}: ${p}`);
        }
      }
    }
    expect(missing).toEqual([]);
  });

  it('documents every environment variable the server and ins worker read', () => {
    const names = new Set<string>();
    loadConfig(new Proxy({}, { get: (_t, name) => (typeof name === 'string' && names.add(name), undefined) }));
    expect(names.size).toBeGreaterThan(30);
    for (const m of read('src/worker/options.ts').matchAll(/'(INS_[A-Z_]+)'/g)) names.add(m[1]!);
    const text = PAGES.map(read).join('\n');
    const missing = [...names].filter((name) => !new RegExp(`\\b${name}\\b`).test(text));
    expect(missing).toEqual([]);
  });
});
