// One event of a front door's stream (front/wire.ts): a module of its own, so that the wires'
// helpers (openai/completion.ts) and the Wire interface can both name it without importing
// each other.
import type { SSEMessage } from '@fastify/sse';

/** One server-sent event, a raw data line (`[DONE]`), or an SSE comment (ignored by parsers). */
export type Event = SSEMessage | string | { comment: string };
