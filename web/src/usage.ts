// An application's usage today (GET /usage with its user key): jobs and output tokens against
// the key's daily quota, in total and per model — the counter the service enforces.
interface Usage {
  day: string;
  reset_seconds: number;
  priority: number;
  used: { jobs: number; tokens: number };
  quota: { jobs: number | null; tokens: number | null };
  models: { model: string; jobs: number; tokens: number }[];
}

const $ = (id: string): HTMLElement => document.getElementById(id)!;
const of = (used: number, quota: number | null) => (quota === null ? `${used} (no limit)` : `${used} of ${quota}`);

async function showUsage(e: Event): Promise<void> {
  e.preventDefault();
  const key = ($('usage-key') as HTMLInputElement).value.trim();
  const error = $('usage-error');
  error.hidden = true;
  const res = await fetch('usage', { headers: { api_key: key } }).catch(() => undefined);
  if (!res?.ok) {
    error.textContent = !res
      ? 'The service could not be reached.'
      : res.status === 401
        ? 'Enter a valid user key (uk_…).'
        : res.status === 403
          ? 'This is not a user key.'
          : 'The usage could not be loaded.';
    error.hidden = false;
    $('usage-result').hidden = true;
    return;
  }
  const u = (await res.json()) as Usage;
  $('usage-jobs').textContent = of(u.used.jobs, u.quota.jobs);
  $('usage-tokens').textContent = of(u.used.tokens, u.quota.tokens);
  $('usage-priority').textContent = String(u.priority);
  $('usage-reset').textContent = `${u.day} (UTC); the counters start again in ${Math.ceil(u.reset_seconds / 3600)} h`;
  const rows = u.models.map((m) => {
    const tr = document.createElement('tr');
    for (const [text, cls] of [
      [m.model, 'mono'],
      [String(m.jobs), ''],
      [String(m.tokens), ''],
    ] as const)
      tr.append(Object.assign(document.createElement('td'), { textContent: text, className: cls }));
    return tr;
  });
  $('usage-models')
    .querySelector('tbody')!
    .replaceChildren(...rows);
  $('usage-result').hidden = false;
}

export function startUsageForm(): void {
  $('usage-form').addEventListener('submit', (e) => void showUsage(e));
}
