// POST /worker/jobs/next (ours, `ins worker`'s own wire): a session's reports of the jobs it
// finished and its next leases, in one round trip, where the seed's wire takes an update_result
// per job and a get_job per lease (both unchanged for the seed's workers). Order, and why:
// - every report is checked first (a job key, a success with its answer, tokens that spell it:
//   routes/job-report.ts), so a bad one refuses the call whole before anything changes;
// - the reports are completed as update_result completes them (jobs/complete.ts; reports of one
//   call share a batch, so one statement), each answered as update_result would answer it
//   alone, a refused one with its reason; all are committed before any lease is taken, so a
//   session's capacity counts the leases it has just ended as free, and a 200 means committed;
// - then up to max_jobs leases (jobs/coordinator.ts take), waiting as get_job's `wait` does.
import { NextJobsRequest, NextJobsResponses, type ReportAnswer } from '../../generated/schemas.js';
import { hashKey, isWellFormedKey, keyKind } from '../../keys.js';
import { HttpError } from '../../http/http-error.js';
import { rideOutage } from '../../db/outage.js';
import { authenticateSession } from '../authenticate.js';
import { jobReportOf, storableReport } from '../job-report.js';
import { jobData } from './get-job.js';
import type { App, Deps } from '../types.js';

export function nextJobsRoute(app: App, deps: Deps): void {
  const { metrics, limiters } = deps;
  const { coordinator } = deps.service;
  app.post(
    '/worker/jobs/next',
    {
      schema: { body: NextJobsRequest, response: NextJobsResponses },
      // As update_result's: a NUL or a lone surrogate in an answer is kept as U+FFFD, not a 422 (routes/job-report.ts).
      preValidation: (req, _reply, done) => {
        const reports = (req.body as { reports?: unknown } | null)?.reports;
        if (Array.isArray(reports)) for (const r of reports) if (typeof r === 'object' && r !== null) storableReport(r as Record<string, unknown>);
        done();
      },
    },
    (req, reply) =>
      rideOutage(async () => {
        const body = req.body;
        const session = await authenticateSession(deps, req);
        const reports = (body.reports ?? []).map((r, i) => {
          if (keyKind(r.api_key) !== 'job' || !isWellFormedKey(r.api_key))
            throw new HttpError(400, `reports[${i}]: only a job key (jk_…, from the job's lease) reports here; nothing was recorded or leased`);
          try {
            return jobReportOf(r, hashKey(r.api_key));
          } catch (err) {
            if (err instanceof HttpError) throw new HttpError(err.statusCode, `reports[${i}]: ${err.detail}`);
            throw err;
          }
        });
        const answers: ReportAnswer[] = await Promise.all(
          reports.map(async (r, i): Promise<ReportAnswer> => {
            const c = await coordinator.complete(r);
            const sent = body.reports![i]!;
            metrics.results.inc({ status: r.status, outcome: c.kind === 'completed' ? 'recorded' : c.kind === 'replayed' ? 'replayed' : 'refused' });
            if (c.kind === 'refused') return { job_id: sent.job_id, accepted: false, status: r.status, points: 0, replayed: false, detail: c.detail };
            const points = c.kind === 'completed' ? c.points : 0;
            if (points > 0) metrics.points.inc(points);
            return { job_id: sent.job_id, accepted: true, status: c.status, points, replayed: c.kind === 'replayed' };
          }),
        );
        const max = Math.min(body.max_jobs ?? 1, session.capacity);
        if (max <= 0) return { reports: answers, jobs: [] };
        if (body.wait) reply.header('x-accel-buffering', 'no');
        const gone = () => req.raw.socket.destroyed;
        const asked = (body.wait ?? 0) * 1000;
        const release = asked > 0 ? limiters.longPolls.enter(`session:${session.id}`, req.ip) : undefined;
        let jobs;
        try {
          jobs = await coordinator.take(session, max, release ? asked : 0, gone);
        } finally {
          release?.();
        }
        if (jobs.length > 0 && gone()) {
          // Nobody is there to get them: the leases go back, and count as no attempt.
          for (const job of jobs) await coordinator.undeliver(job);
          return { reports: answers, jobs: [] };
        }
        return { reports: answers, jobs: jobs.map((job) => jobData(job, session)) };
      }),
  );
}
