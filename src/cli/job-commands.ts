// ins job list|show|cancel: the coordinator's jobs, as an operator sees them.
import { listJobs, showJob } from '../jobs/operator.js';
import { isJobId } from '../jobs/read.js';
import { JOB_STATES } from '../jobs/states.js';
import { listCommand, operatorJobs, type Command } from './command.js';
import { CommandError, table, UsageError, wholeNumberFlag } from './io.js';

const limitOf = (raw: string | undefined): number => wholeNumberFlag('limit', raw, 1, 100_000, 50);

function stateOf(raw: string | undefined): string | undefined {
  if (raw !== undefined && !(JOB_STATES as readonly string[]).includes(raw))
    throw new UsageError(`--state must be one of ${JOB_STATES.join(', ')}, got "${raw}"`);
  return raw;
}

function jobId(raw: string): string {
  if (!isJobId(raw)) throw new UsageError(`ID must be a job id (a UUID), got "${raw}"`);
  return raw;
}

export const JOB_COMMANDS: Record<string, Command> = {
  'job list': listCommand({
    usage: 'job list [--state STATE] [--model MODEL] [--limit N]',
    summary: 'list jobs, newest first (default 50)',
    flags: ['state', 'model', 'limit'],
    load: (db, { filter }) => {
      const state = stateOf(filter.state);
      return listJobs(db, { ...(state ? { state } : {}), ...(filter.model ? { model: filter.model } : {}), limit: limitOf(filter.limit) });
    },
    empty: 'no jobs',
    columns: ['ID', 'KIND', 'STATE', 'MODEL', 'OWNER', 'NODE', 'ATTEMPTS', 'SUBMITTED', 'FINISHED'],
    row: (j) => [j.id, j.kind, j.state, j.model, j.owner, j.node ?? '-', String(j.attempts), j.submitted_at, j.finished_at ?? '-'],
  }),
  'job show': {
    usage: 'job show ID',
    summary: 'a job with its request, answer and every lease (attempt, node, outcome)',
    args: ['ID'],
    async run(db, [id], { json }, io) {
      const job = await showJob(db, jobId(id!));
      if (!job) throw new CommandError(`no job ${id}`);
      if (json) return io.out(JSON.stringify(job));
      for (const [k, v] of Object.entries(job))
        if (k !== 'leases') io.out(`${k}: ${typeof v === 'string' || v === null ? String(v) : JSON.stringify(v)}`);
      if (job.leases.length === 0) return io.out('leases: none');
      io.out('leases:');
      for (const line of table([
        ['ATTEMPT', 'NODE', 'LEASED', 'ENDED', 'OUTCOME'],
        ...job.leases.map((l) => [String(l.attempt), l.node, l.leased_at, l.ended_at ?? '-', l.outcome ?? 'open']),
      ]))
        io.out(`  ${line}`);
    },
  },
  'job cancel': {
    usage: 'job cancel ID',
    summary: "cancel a queued or leased job (a leased one's node is told to stop, and earns nothing for it); a canceled one stays canceled (exit 0)",
    args: ['ID'],
    async run(db, [id], opts, io) {
      // Through the lifecycle: every server hears it and wakes whoever waits for the job.
      const { before, canceled } = await operatorJobs(db, opts).cancel(jobId(id!), null, 'canceled by an operator');
      if (before === undefined) throw new CommandError(`no job ${id}`);
      // Already canceled: done, as POST /cancel_job answers it (a script that cancels twice has what it asked for).
      if (!canceled && before !== 'canceled')
        throw new CommandError(`job ${id} is ${before === 'queued' || before === 'leased' ? 'finished' : before}: it cannot be canceled`);
      io.out(
        opts.json
          ? JSON.stringify({ id, state: 'canceled', was: before })
          : canceled
            ? `job ${id} canceled (it was ${before})`
            : `job ${id} was already canceled`,
      );
    },
  },
};
