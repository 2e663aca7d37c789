// GET /: the dashboard, built into web/dist by `npm run build` (scripts/build-web.ts) and
// served from there. Files are registered one by one (no wildcard route), so unknown paths
// still get the API's own 404 and 405 bodies.
import { existsSync } from 'node:fs';
import path from 'node:path';
import fastifyStatic from '@fastify/static';
import { PACKAGE_ROOT } from '../paths.js';
import type { App } from './types.js';

export const DASHBOARD_DIR = path.join(PACKAGE_ROOT, 'web', 'dist');

export async function dashboardRoutes(app: App): Promise<void> {
  if (!existsSync(path.join(DASHBOARD_DIR, 'index.html'))) {
    app.log.warn(`dashboard not built (${DASHBOARD_DIR} missing): run npm run build`);
    return;
  }
  await app.register(fastifyStatic, {
    root: DASHBOARD_DIR,
    prefix: '/',
    wildcard: false,
    index: ['index.html'],
    decorateReply: false,
    // No cache for the page itself; assets are small and change with each build.
    cacheControl: true,
    maxAge: 0,
  });
}
