// What a job asks of a node: the seed system's job_data fields (openapi.json, GetJobResponse),
// as stored in jobs.request.
import { randomInt } from 'node:crypto';

export interface JobRequest {
  messages: { role: string; content: string }[];
  /** Most tokens to generate; 0: the node's default. */
  max_output: number;
  temperature: number;
  /** Ours: the sampling seed every node that runs the job (or a copy of it) gets. Absent in jobs older than it. */
  seed?: number;
  /** Ours: a client streams the answer, so a worker may send partial output (POST /worker/job_progress). */
  stream?: boolean;
}

/** A seed for a job whose user gave none. */
export const randomSeed = (): number => randomInt(2 ** 31 - 1);
