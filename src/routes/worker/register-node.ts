// POST /worker/register_node: opens a worker session and returns its token (ns_). Only for
// whoever holds the node's key: sent as `Authorization: Bearer`, the `api_key` header or the
// body's `secret` — or, for the real worker, which sends none, proven by a check_node_secret
// from the same address (the rules, the check's one use and its give-back when an answer is not
// delivered: src/nodes/registration.ts). This route is the schema, the refusals' words, and
// telling the registration whether its answer reached the worker.
import type { ServerResponse } from 'node:http';
import { RegisterNodeRequest, RegisterNodeResponses } from '../../generated/schemas.js';
import { NodeDisabledError } from '../../nodes/registration.js';
import { HttpError } from '../../http/http-error.js';
import { bearerToken } from '../authenticate.js';
import { headerKey } from '../../http/credentials.js';
import type { App, Deps } from '../types.js';
import { rideOutage } from '../../db/outage.js';

const UNPROVEN = 'Registering a node takes its key: send it as Authorization: Bearer, or call /check_node_secret first';
const wrongKey = (node: string): string =>
  `The key sent is not node "${node}"'s key (was it rotated with \`ins node rotate-key\`, or is the node named otherwise?)`;

export function registerNodeRoute(app: App, { service: { nodes }, limiters }: Deps): void {
  app.post('/worker/register_node', { schema: { body: RegisterNodeRequest, response: RegisterNodeResponses } }, (req, reply) =>
    rideOutage(async () => {
      const { node_url, node_version, stats, secret, capacity } = req.body;
      // Read now: once the client has gone, its socket no longer says where it was.
      const address = req.ip;
      const offered = [bearerToken(req), headerKey(req), secret].filter((k): k is string => typeof k === 'string' && k.length > 0);
      let r;
      try {
        r = await nodes.register({ name: node_url, offered, address, nodeVersion: node_version ?? '', stats: stats ?? {}, capacity: capacity ?? 1 });
      } catch (err) {
        if (!(err instanceof NodeDisabledError)) throw err;
        req.nodeName = err.node;
        throw new HttpError(403, err.message);
      }
      // The same words whether or not a node of that name exists: a wrong key learns nothing more
      // (429 instead once the address is over its budget of failures).
      if ('refused' in r) return limiters.failures.refuse(address, new HttpError(401, r.refused === 'unproven' ? UNPROVEN : wrongKey(node_url)));
      req.nodeName = r.node;
      const { handoff } = r;
      if (handoff) {
        whenUndelivered(reply.raw, handoff.delivered, async () => {
          try {
            await handoff.undelivered();
            req.log.info(
              { node: r.node },
              'register_node: its answer did not reach the worker; the session is ended and the check given back for a retry',
            );
          } catch (err) {
            req.log.warn({ err, node: r.node }, 'register_node: its answer did not reach the worker, and giving its check back failed');
          }
        });
      }
      return { access_token: r.token, token_type: 'bearer' };
    }),
  );
}

/**
 * Runs `delivered` once the response, not sent yet, is handed whole to the OS ('finish'), or
 * `then` (which reports its own failures) if it closes before that — at once if its connection
 * has gone already.
 */
function whenUndelivered(res: ServerResponse, delivered: () => void, then: () => Promise<void>): void {
  const run = (): void => {
    then().catch(() => undefined);
  };
  if (res.destroyed) return run();
  let finished = false;
  res.once('finish', () => {
    finished = true;
    delivered();
  });
  res.once('close', () => {
    if (!finished) run();
  });
}
