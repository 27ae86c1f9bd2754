// Types for parse-prometheus-text-format (the package ships none), as its README documents them.
declare module 'parse-prometheus-text-format' {
  export interface Sample {
    value: string;
    labels?: Record<string, string>;
    timestamp_ms?: string;
  }
  export interface HistogramSample {
    buckets: Record<string, string>;
    count?: string;
    sum?: string;
    labels?: Record<string, string>;
  }
  export interface SummarySample {
    quantiles: Record<string, string>;
    count?: string;
    sum?: string;
    labels?: Record<string, string>;
  }
  export interface MetricFamily {
    name: string;
    help: string;
    type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
    metrics: Array<Sample | HistogramSample | SummarySample>;
  }
  export default function parsePrometheusTextFormat(text: string): MetricFamily[];
}
