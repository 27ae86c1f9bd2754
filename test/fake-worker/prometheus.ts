/**
 * Reads a fake worker's /metrics the way a scraper would: through a maintained Prometheus text
 * parser (parse-prometheus-text-format, which ships no types, hence the narrow typing here).
 */
import { createRequire } from 'node:module';

export interface Sample {
  value: string;
  labels?: Record<string, string>;
  timestamp_ms?: string;
  buckets?: Record<string, string>;
}

export interface Family {
  name: string;
  help: string;
  type: string;
  metrics: Sample[];
}

const require = createRequire(import.meta.url);
export const parsePrometheus = require('parse-prometheus-text-format') as (text: string) => Family[];

export async function scrape(url: string): Promise<Family[]> {
  const res = await fetch(`${url}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  return parsePrometheus(await res.text());
}

export function family(families: Family[], name: string): Family | undefined {
  return families.find((f) => f.name === name);
}

/** The value of a family's only (or first) sample, as a number; undefined when the family is absent. */
export function value(families: Family[], name: string): number | undefined {
  const f = family(families, name);
  const s = f?.metrics[0];
  return s === undefined ? undefined : Number(s.value);
}
