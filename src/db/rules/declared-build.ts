// The quantisation a node declared for a model (session_model_builds, issue 31) in the session
// that did a job: its done lease's. Included as text by the statements that record or judge by
// it (src/verify/scores.ts, src/verify/canaries.ts), for the reason src/db/rules/suspended.ts
// gives: a function with a subquery would be an opaque call per row. The aliases are ones no
// such statement uses.

/** SQL: the quantisation declared for the model `modelId` by the session that did the job `jobId` (its done lease), or NULL. */
export const doneQuantization = (jobId: string, modelId: string): string =>
  `(SELECT done_build.quantization FROM job_leases done_lease JOIN session_model_builds done_build
      ON done_build.session_id = done_lease.session_id AND done_build.model_id = ${modelId}
    WHERE done_lease.job_id = ${jobId} AND done_lease.outcome = 'done' ORDER BY done_lease.attempt DESC LIMIT 1)`;
