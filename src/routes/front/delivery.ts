// Checked delivery's request header (issue 55; docs/verification.md, "Checked delivery"):
// `x-ins-delivery: checked` asks that this request's answer be given only once a check of it
// passed; `immediate` (or no header) asks nothing more than the key's own setting (`ins key
// set-delivery`: a key set to checked stays checked). Any other value is refused before anything
// is submitted; each front door puts the refusal in its own shape.
import type { FastifyReply, FastifyRequest } from 'fastify';

export const DELIVERY_HEADER = 'x-ins-delivery';

/** Why a request's delivery header was refused (each door answers 400 with this message). */
export class BadDeliveryHeader extends Error {
  constructor(value: string) {
    super(`Invalid header '${DELIVERY_HEADER}': ${JSON.stringify(value.slice(0, 64))}; it takes 'checked' or 'immediate'.`);
  }
}

/** Whether the request asks for checked delivery; throws BadDeliveryHeader for a value it does not take. */
export function asksChecked(req: FastifyRequest): boolean {
  const raw = req.headers[DELIVERY_HEADER];
  if (raw === undefined) return false;
  const value = (Array.isArray(raw) ? raw.join(',') : raw).trim().toLowerCase();
  if (value === 'checked') return true;
  if (value === 'immediate') return false;
  throw new BadDeliveryHeader(Array.isArray(raw) ? raw.join(',') : raw);
}

/** The answer says how it was delivered: `x-ins-delivery: checked` on an answer a check passed. */
export function tellChecked(reply: FastifyReply, held: boolean): void {
  if (held) void reply.header(DELIVERY_HEADER, 'checked');
}
