/**
 * Reads a `/metrics` exposition with parse-prometheus-text-format (which throws on any malformed
 * line, so parsing is also a syntax check) into lookups for tests.
 *
 * The library reads labelled counters and gauges correctly but folds every series of a labelled
 * histogram into one; `histogram()` therefore hands it one series at a time, with the series'
 * own labels taken off.
 */
import parsePrometheusTextFormat, { type MetricFamily } from 'parse-prometheus-text-format';

export interface Exposition {
  text: string;
  families: MetricFamily[];
  family(name: string): MetricFamily | undefined;
  /** The value of a counter or gauge series (exact label match); undefined when absent. */
  value(name: string, labels?: Record<string, string>): number | undefined;
  /** Sum over every series of a counter or gauge family whose labels include `labels`. */
  sum(name: string, labels?: Record<string, string>): number;
  /** One histogram series: its count, sum and cumulative buckets. */
  histogram(name: string, labels?: Record<string, string>): { count: number; sum: number; buckets: Record<string, number> } | undefined;
}

const labelsMatch = (have: Record<string, string> | undefined, want: Record<string, string>, exact: boolean): boolean => {
  const h = have ?? {};
  if (exact && Object.keys(h).length !== Object.keys(want).length) return false;
  return Object.entries(want).every(([k, v]) => h[k] === v);
};

function labelText(labels: Record<string, string>): string[] {
  return Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
}

export function parseExposition(text: string): Exposition {
  const families = parsePrometheusTextFormat(text);
  const family = (name: string) => families.find((f) => f.name === name);
  return {
    text,
    families,
    family,
    value(name, labels = {}) {
      const m = family(name)?.metrics.find((s) => 'value' in s && labelsMatch(s.labels, labels, true));
      return m && 'value' in m ? Number(m.value) : undefined;
    },
    sum(name, labels = {}) {
      return (family(name)?.metrics ?? []).reduce((acc, s) => acc + ('value' in s && labelsMatch(s.labels, labels, false) ? Number(s.value) : 0), 0);
    },
    histogram(name, labels = {}) {
      const f = family(name);
      if (!f || f.type !== 'HISTOGRAM') return undefined;
      const own = labelText(labels);
      const own_ = new RegExp(`^${name}(_bucket|_sum|_count)[{ ]`);
      const lines = text.split('\n').filter((l) => {
        if (!own_.test(l)) return false;
        const series = l.includes('{') ? l.slice(l.indexOf('{') + 1, l.indexOf('}')).split(',').filter((p) => p && !p.startsWith('le=')) : [];
        return series.length === own.length && own.every((p) => series.includes(p));
      });
      if (lines.length === 0) return undefined;
      // Drop the series' own labels: left with `le` on buckets and none on _sum/_count.
      const stripped = lines.map((l) => own.reduce((acc, p) => acc.replace(new RegExp(`,?${p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`), ''), l).replace('{,', '{').replace('{}', ''));
      const [one] = parsePrometheusTextFormat([`# TYPE ${name} histogram`, ...stripped, ''].join('\n'));
      const s = one?.metrics[0];
      if (!s || !('buckets' in s)) return undefined;
      return {
        count: Number(s.count),
        sum: Number(s.sum),
        buckets: Object.fromEntries(Object.entries(s.buckets ?? {}).map(([k, v]) => [k, Number(v)])),
      };
    },
  };
}

export async function scrape(admin: string): Promise<Exposition> {
  const res = await fetch(`${admin}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  if (!/^text\/plain; version=0\.0\.4/.test(res.headers.get('content-type') ?? '')) throw new Error(`content-type ${res.headers.get('content-type')}`);
  return parseExposition(await res.text());
}
