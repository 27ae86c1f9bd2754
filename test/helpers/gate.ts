/**
 * An in-process kvgate on free ports, wired exactly as `kvgate serve` wires it (startKvgate).
 */
import { parseConfig } from '../../src/config/load.js';
import { startKvgate, type RunningKvgate, type StartOptions } from '../../src/app.js';
import type { GateResult } from '../../src/gate/gate.js';
import type { Logger } from '../../src/telemetry/logger.js';
import { silentLogger } from './logger.js';

export interface TestGate extends RunningKvgate {
  target: string;
  admin: string;
  results: GateResult[];
}

export async function startTestGate(
  rawConfig: unknown,
  opts: { store?: string; logger?: Logger; processMetrics?: boolean; configFile?: string; reloadDebounceMs?: number; adminHost?: string } & Pick<
    StartOptions,
    'storeTls' | 'tls' | 'fullDuplexBodyWaitMs' | 'connectionAgeMs' | 'connectionMaxStreams' | 'adminToken' | 'sessionHashKey' | 'sessionHashKeyPrevious'
  > = {},
): Promise<TestGate> {
  const results: GateResult[] = [];
  const running = await startKvgate({
    config: parseConfig(rawConfig),
    logger: opts.logger ?? silentLogger(),
    store: opts.store ?? 'memory',
    ...(opts.storeTls ? { storeTls: opts.storeTls } : {}),
    ...(opts.tls ? { tls: opts.tls } : {}),
    grpcHost: '127.0.0.1',
    grpcPort: 0,
    adminHost: opts.adminHost ?? '127.0.0.1',
    adminPort: 0,
    ...(opts.adminToken !== undefined ? { adminToken: opts.adminToken } : {}),
    ...(opts.sessionHashKey !== undefined ? { sessionHashKey: opts.sessionHashKey } : {}),
    ...(opts.sessionHashKeyPrevious !== undefined ? { sessionHashKeyPrevious: opts.sessionHashKeyPrevious } : {}),
    onResult: (r) => results.push(r),
    // Node's process metrics add a timer per gate; tests that want them ask.
    processMetrics: opts.processMetrics ?? false,
    ...(opts.configFile !== undefined ? { configFile: opts.configFile } : {}),
    ...(opts.reloadDebounceMs !== undefined ? { reloadDebounceMs: opts.reloadDebounceMs } : {}),
    ...(opts.fullDuplexBodyWaitMs !== undefined ? { fullDuplexBodyWaitMs: opts.fullDuplexBodyWaitMs } : {}),
    ...(opts.connectionAgeMs !== undefined ? { connectionAgeMs: opts.connectionAgeMs } : {}),
    ...(opts.connectionMaxStreams !== undefined ? { connectionMaxStreams: opts.connectionMaxStreams } : {}),
  });
  return { ...running, target: `127.0.0.1:${running.grpcPort}`, admin: `http://127.0.0.1:${running.adminPort}`, results };
}

/**
 * Sets a worker's state through the admin API, as an operator would: a 503 (the store did not
 * confirm within `store.timeout_ms`, e.g. on a CPU-starved machine) is answered by setting it
 * again, as the answer says, a few times; anything else but 200 fails.
 */
export async function setWorkerState(admin: string, worker: string, state: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    const res = await fetch(`${admin}/workers/${encodeURIComponent(worker)}/state`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ state }),
    });
    if (res.status === 200) return;
    if (res.status !== 503 || attempt === 5) throw new Error(`admin answered ${res.status}: ${await res.text()}`);
    await res.arrayBuffer();
  }
}

export async function workers(admin: string): Promise<Array<{ id: string; state: string; inflight: number }>> {
  const res = await fetch(`${admin}/workers`);
  return ((await res.json()) as { workers: Array<{ id: string; state: string; inflight: number }> }).workers;
}
