// The machine's PostgreSQL cluster (Debian's pg_ctlcluster), which the fault tests stop and
// start under load (test/faults/, `npm run test:faults`, run alone).
import { execSync } from 'node:child_process';
import { until } from './wait.js';

/** The cluster's version (its folder in /etc/postgresql), or undefined where there is none. */
export const cluster = (() => {
  try {
    return execSync('ls /etc/postgresql').toString().trim().split('\n')[0];
  } catch {
    return undefined;
  }
})();

/** pg_ctlcluster's `action` (`stop -m fast`, `start`) on the cluster's main instance. */
export const pgctl = (action: string) => execSync(`pg_ctlcluster --skip-systemctl-redirect ${cluster} main ${action}`, { stdio: 'ignore' });

/** Resolves once PostgreSQL accepts connections on 127.0.0.1:5432 again. */
export const pgReady = () =>
  until(
    'PostgreSQL to come back',
    () => {
      try {
        execSync('pg_isready -h 127.0.0.1 -p 5432 -q');
        return true;
      } catch {
        return false;
      }
    },
    20_000,
  );
