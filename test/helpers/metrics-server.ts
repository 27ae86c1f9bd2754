/**
 * A stand-in model server's /metrics for tests: vLLM-format text whose values the test sets, and
 * switches for the failures a scraper must survive (HTTP errors, hangs, garbage).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface MetricsValues {
  running?: number;
  waiting?: number;
  kv?: number;
  temp?: number;
}

export type MetricsMode = 'ok' | 'error' | 'hang' | 'garbage' | 'empty';

export interface MetricsServer {
  url: string;
  set(v: MetricsValues): void;
  mode(m: MetricsMode): void;
  close(): Promise<void>;
}

export function vllmText(v: MetricsValues): string {
  const lines = [
    '# HELP vllm:num_requests_running Number of requests in model execution batches.',
    '# TYPE vllm:num_requests_running gauge',
    `vllm:num_requests_running{model_name="m"} ${v.running ?? 0}`,
    '# TYPE vllm:num_requests_waiting gauge',
    `vllm:num_requests_waiting{model_name="m"} ${v.waiting ?? 0}`,
    '# TYPE vllm:kv_cache_usage_perc gauge',
    `vllm:kv_cache_usage_perc{model_name="m"} ${v.kv ?? 0}`,
    '# TYPE vllm:cache_config_info gauge',
    'vllm:cache_config_info{block_size="16",num_gpu_blocks="25000"} 1',
  ];
  if (v.temp !== undefined) lines.push('# TYPE DCGM_FI_DEV_GPU_TEMP gauge', `DCGM_FI_DEV_GPU_TEMP{gpu="0"} ${v.temp}`);
  return lines.join('\n') + '\n';
}

export async function startMetricsServer(initial: MetricsValues = {}): Promise<MetricsServer> {
  let values = initial;
  let mode: MetricsMode = 'ok';
  const server = http.createServer((req, res) => {
    if (mode === 'hang') return; // never answers: the scraper's timeout must fire
    if (mode === 'error') {
      res.writeHead(500).end('boom');
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
    res.end(mode === 'garbage' ? '\u0000\u0001 not {{ prometheus ]] at all\n' : mode === 'empty' ? '' : vllmText(values));
    void req;
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/metrics`,
    set: (v) => (values = { ...values, ...v }),
    mode: (m) => (mode = m),
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
