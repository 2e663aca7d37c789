// ins node audit|reinstate: why a node stands where it does (verification, docs/verification.md),
// and bringing a suspended node back. ins verify calibrate: the token-level test's thresholds per
// group, from honest nodes' checks of each other (src/verify/thresholds.ts).
import { nodeAudit, nodeStanding } from '../verify/audit-view.js';
import { nodeTokenChecks } from '../verify/scores-view.js';
import { calibrate, DEFAULT_MIN_ANSWERS } from '../verify/thresholds.js';
import { operatorNodes, type Command } from './command.js';
import { CommandError, table, wholeNumberFlag } from './io.js';

const minAnswers = (raw: string | undefined): number => wholeNumberFlag('min-answers', raw, 1, 1_000_000, DEFAULT_MIN_ANSWERS);

const rate = (x: number): string => x.toFixed(4);

export const VERIFY_COMMANDS: Record<string, Command> = {
  'node audit': {
    usage: 'node audit NAME',
    summary: "a node's verification record: standing, strikes with their evidence, points taken back, jobs checked",
    args: ['NAME'],
    async run(db, [name], { json, verify }, io) {
      const a = await nodeAudit(db, name!, verify);
      if (!a) throw new CommandError(`no node named "${name}"`);
      const tokens = await nodeTokenChecks(db, name!);
      if (json) return io.out(JSON.stringify({ ...a, token_checks: tokens }));
      io.out(`node: ${a.name}`);
      io.out(`standing: ${a.standing}${a.since ? ` since ${a.since}` : ''}${a.reinstated_at ? ` (reinstated ${a.reinstated_at})` : ''}`);
      io.out(`strikes counting: ${a.strikes_counting} of ${verify.strikesToSuspend} (within ${verify.evidenceWindow / 3600} h)`);
      io.out(`agreements: ${a.agreements} (${a.clean_streak} in a row); jobs checked by another node (window): ${a.checked_jobs}`);
      io.out(
        `check rate: ${(a.check_rate * 100).toFixed(2)} % of its jobs (${a.standing === 'probation' ? 'every job: on probation' : a.clean_streak < verify.probationAgreements ? `VERIFY_SHARE until ${verify.probationAgreements} agreements in a row` : `falling with its run, floor ${verify.floor}`})`,
      );
      for (const k of tokens) {
        io.out(
          `token-level checks of ${k.model}: ${k.scored} jobs scored, ${k.copied} checked the weaker way (a copy compared as text); test ${k.cusum} of ${k.threshold} over ${k.answers} answers (${k.mismatches} confident mismatches in ${k.positions} positions)${k.flags ? `; flagged ${k.flags}× (last ${k.flagged_at})` : ''}`,
        );
      }
      io.out(
        `points taken back: ${a.reversals.points} for ${a.reversals.results} results${
          Object.keys(a.reversals.by_reason).length
            ? ` (${Object.entries(a.reversals.by_reason)
                .map(([r, p]) => `${r}: ${p}`)
                .join(', ')})`
            : ''
        }`,
      );
      if (a.strikes.length === 0) return io.out('strikes: none');
      io.out('strikes:');
      for (const line of table([['AT', 'KIND', 'JOB', 'EVIDENCE'], ...a.strikes.map((s) => [s.at, s.kind, s.job_id, JSON.stringify(s.evidence)])]))
        io.out(`  ${line}`);
    },
  },
  'node reinstate': {
    usage: 'node reinstate NAME',
    summary: 'bring a node on probation or suspended back to trusted; its strikes so far no longer count (points taken back stay so)',
    args: ['NAME'],
    async run(db, [name], opts, io) {
      const { json } = opts;
      // Servers cache keys and sessions with the node's standing: the lifecycle announces it.
      if (!(await operatorNodes(db, opts).restore(name!))) {
        const a = await nodeStanding(db, name!, { ...opts.verify, evidenceWindow: 0 });
        throw new CommandError(a ? `node "${name}" is ${a.standing} already` : `no node named "${name}"`);
      }
      io.out(json ? JSON.stringify({ name, standing: 'trusted' }) : `node "${name}" reinstated: trusted again`);
    },
  },
  'verify calibrate': {
    usage: 'verify calibrate [--min-answers N] [--apply]',
    summary:
      "token-level test thresholds per model, method and quantisation from trusted nodes' checks of each other (evidence window); --apply writes the proposals",
    args: [],
    flags: ['min-answers', 'apply'],
    async run(db, _args, { json, apply, filter, verify }, io) {
      const min = minAnswers(filter.minAnswers);
      const r = await calibrate(db, { windowSeconds: verify.evidenceWindow, minAnswers: min, apply });
      if (json) return io.out(JSON.stringify({ min_answers: min, groups: r.groups, applied: apply ? r.applied : null }));
      if (r.groups.length === 0) io.out(`no token-level checks between trusted nodes within the evidence window (${verify.evidenceWindow / 3600} h)`);
      else {
        const t = (x: { p0: number; p1: number }) => `${x.p0}/${x.p1}`;
        for (const line of table([
          ['MODEL', 'METHOD', 'QUANTIZATION', 'ANSWERS', 'POSITIONS', 'RATE', 'UPPER', 'PROPOSED P0/P1', 'CURRENT P0/P1'],
          ...r.groups.map((g) => [
            g.model,
            g.method,
            g.quantization ?? '-',
            String(g.answers),
            String(g.positions),
            rate(g.rate),
            rate(g.upper),
            g.proposed ? t(g.proposed) : g.status === 'too noisy' ? 'too noisy to judge by tokens' : `fewer than ${min} answers`,
            t(g.current),
          ]),
        ]))
          io.out(line);
      }
      io.out(
        apply
          ? `applied ${r.applied} threshold${r.applied === 1 ? '' : 's'}`
          : `${r.groups.filter((g) => g.proposed).length} proposed; review them, then run again with --apply`,
      );
    },
  },
};
