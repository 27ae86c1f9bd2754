/**
 * Shared pieces for the knob and pool tests: the example in envoy/pools/ (Envoy bootstrap and
 * kvgate config), requests for its two hosts, and upstreams that hold requests in flight.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { loadEnvoyConfig, withExtProc, type ParsedEnvoyConfig } from '../harness/envoy-config.js';
import type { EnvoyHarness, HarnessRequest, Outcome, UpstreamResponse } from '../harness/envoy-harness.js';
import { waitFor } from '../helpers/envoy.js';
import type { TestGate } from '../helpers/gate.js';

export const POOLS_ENVOY_YAML = path.resolve(import.meta.dirname, '../../envoy/pools/envoy.yaml');
export const POOLS_KVGATE_YAML = path.resolve(import.meta.dirname, '../../envoy/pools/kvgate.yaml');

export const LLAMA = 'meta-llama/Llama-3.1-70B-Instruct';
export const MISTRAL = 'mistralai/Mistral-7B-Instruct-v0.3';
export const LLAMA_CLUSTERS = new Set(['llama_1', 'llama_2']);
export const MISTRAL_CLUSTERS = new Set(['mistral_1', 'mistral_2']);

/**
 * envoy/pools/envoy.yaml as the harness plays it. The message timeout is raised from the file's
 * 0.5 s: these tests are about knobs, and a loaded CI machine must not turn them into timeouts.
 */
export function poolsEnvoy(): ParsedEnvoyConfig {
  return withExtProc(loadEnvoyConfig(POOLS_ENVOY_YAML), { messageTimeoutMs: 10_000 });
}

/** envoy/pools/kvgate.yaml as a plain object, for tests that adjust it before starting a gate. */
export function poolsKvgate(): Record<string, unknown> & { pools: Array<Record<string, unknown>> } {
  return parse(readFileSync(POOLS_KVGATE_YAML, 'utf8')) as Record<string, unknown> & { pools: Array<Record<string, unknown>> };
}

export function chatOn(host: string, opts: { model?: string; text?: string; system?: string; headers?: Record<string, string> } = {}): HarnessRequest {
  const messages = [...(opts.system ? [{ role: 'system', content: opts.system }] : []), { role: 'user', content: opts.text ?? 'hello' }];
  return {
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { host, 'content-type': 'application/json', ...opts.headers },
    body: JSON.stringify({ ...(opts.model !== undefined ? { model: opts.model } : {}), messages }),
  };
}

export function completionOn(host: string, opts: { model?: string; prompt?: string; headers?: Record<string, string> } = {}): HarnessRequest {
  return {
    method: 'POST',
    path: '/v1/completions',
    headers: { host, 'content-type': 'application/json', ...opts.headers },
    body: JSON.stringify({ model: opts.model ?? LLAMA, prompt: opts.prompt ?? 'Once upon a time' }),
  };
}

/**
 * Requests whose upstream does not answer until `release()`: each keeps its in-flight lease
 * (kvgate releases at the response headers) for as long as the test needs.
 */
export class HeldRequests {
  private readonly pending: Array<Promise<Outcome>> = [];
  private open!: () => void;
  private readonly gate = new Promise<void>((resolve) => (this.open = resolve));

  constructor(
    private readonly h: EnvoyHarness,
    private readonly g: TestGate,
  ) {}

  /** Sends the requests and waits until the gate has decided every one of them. */
  async hold(reqs: HarnessRequest[]): Promise<void> {
    const before = this.g.results.length;
    const upstream = async (): Promise<UpstreamResponse> => {
      await this.gate;
      return { status: 200, body: '{}' };
    };
    for (const r of reqs) this.pending.push(this.h.request(r, upstream));
    await waitFor(() => this.g.results.length >= before + reqs.length, 10_000, `${reqs.length} decisions`);
  }

  /** Lets every held request finish; resolves with their outcomes. */
  release(): Promise<Outcome[]> {
    this.open();
    return Promise.all(this.pending);
  }
}
