// Bundles the dashboard (web/) into web/dist/ at build time: one script, one stylesheet and
// the page, so the service serves everything itself and nothing comes from the internet.
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const web = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'web');
const out = path.join(web, 'dist');
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: path.join(web, 'src', 'main.ts') },
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['es2020'],
  outdir: out,
  legalComments: 'linked',
  logLevel: 'warning',
});
copyFileSync(path.join(web, 'index.html'), path.join(out, 'index.html'));
console.log(`built ${path.relative(process.cwd(), out)}`);
