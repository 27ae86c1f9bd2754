/**
 * `kvgate fake-worker`: a simulated vLLM server (OpenAI-compatible API, vLLM-format `/metrics`,
 * a prefix KV cache) for tests, the demo and benchmarks. When it is ready it prints one JSON line,
 * `{"msg":"fake-worker listening","port":N,...}`, on stdout; SIGINT or SIGTERM stops it.
 */
import { Command, Option } from 'commander';
import { finiteNumber, LOG_LEVELS, nonNegativeNumber, port, positiveInt, positiveNumber } from './arg-parsers.js';
import { HEALTH_MODES, METRIC_NAMES, METRICS_MODES, type ControlState } from '../fake-worker/controls.js';
import { FAKE_WORKER_DEFAULTS as D } from '../fake-worker/defaults.js';
import { startFakeWorker } from '../fake-worker/server.js';
import { createLogger } from '../telemetry/logger.js';

interface FakeWorkerFlags {
  port: number;
  host: string;
  id: string;
  model: string;
  kvCapacityTokens: number;
  blockTokens: number;
  prefillTokS: number;
  prefillOverheadMs: number;
  decodeMs: number;
  maxBatch: number;
  maxWaiting: number;
  outputTokens: number;
  dcgm?: boolean;
  gpuMemoryMib: number;
  loraModules?: string;
  maxLoras: number;
  kvUsage?: number;
  gpuTemp?: number;
  metrics: ControlState['metrics'];
  metricsDelayMs: number;
  metricNames: ControlState['metric_names'];
  health: ControlState['health'];
  slowFactor: number;
  logLevel: string;
}

export interface FakeWorkerOutput {
  write(text: string): void;
}

export function registerFakeWorkerCommand(program: Command, out: FakeWorkerOutput = process.stdout): void {
  program
    .command('fake-worker')
    .description('run a simulated vLLM model server: OpenAI-compatible API, vLLM /metrics, a prefix KV cache, and test hooks (POST /control)')
    .addOption(new Option('--port <port>', 'HTTP port (0: a free port, printed when ready)').argParser(port).default(D.port))
    .addOption(new Option('--host <host>', 'bind address').default(D.host))
    .addOption(new Option('--id <id>', 'worker id: in logs, the x-fake-worker-id header and DCGM labels').default(D.id))
    .addOption(new Option('--model <name>', 'model name served').default(D.model))
    .addOption(new Option('--kv-capacity-tokens <n>', 'KV cache size in tokens (also the longest request)').argParser(positiveInt).default(D.kvCapacityTokens))
    .addOption(new Option('--block-tokens <n>', 'tokens per KV block').argParser(positiveInt).default(D.blockTokens))
    .addOption(new Option('--prefill-tok-s <n>', 'prefill rate on uncached prompt tokens, tokens/s').argParser(positiveNumber).default(D.prefillTokensPerS))
    .addOption(new Option('--prefill-overhead-ms <ms>', 'fixed time to first token, even on a full hit').argParser(nonNegativeNumber).default(D.prefillOverheadMs))
    .addOption(new Option('--decode-ms <ms>', 'time per generated token').argParser(nonNegativeNumber).default(D.decodeMsPerToken))
    .addOption(new Option('--max-batch <n>', 'most requests running at once; the rest wait').argParser(positiveInt).default(D.maxBatch))
    .addOption(new Option('--max-waiting <n>', 'most requests waiting; past it, 503').argParser(positiveInt).default(D.maxWaiting))
    .addOption(new Option('--output-tokens <n>', 'tokens generated when a request sets no max_tokens').argParser(positiveInt).default(D.defaultOutputTokens))
    .addOption(new Option('--dcgm', 'also expose DCGM GPU metrics (FB_USED, FB_FREE, GPU_TEMP) on /metrics'))
    .addOption(new Option('--gpu-memory-mib <n>', 'GPU framebuffer size DCGM reports').argParser(positiveInt).default(D.gpuMemoryMib))
    .addOption(new Option('--lora-modules <names>', "LoRA adapters served, comma-separated (vLLM's --lora-modules names); adds vllm:lora_requests_info"))
    .addOption(new Option('--max-loras <n>', "most adapters in one batch (vLLM's --max-loras), reported as max_lora").argParser(positiveInt).default(D.maxLoras))
    .addOption(new Option('--kv-usage <x>', 'test hook: report this KV usage (0..1) whatever the load').argParser(finiteNumber))
    .addOption(new Option('--gpu-temp <c>', 'test hook: report this GPU temperature, °C').argParser(finiteNumber))
    .addOption(new Option('--metrics <mode>', 'test hook: how /metrics answers').choices(METRICS_MODES).default('ok'))
    .addOption(new Option('--metrics-delay-ms <ms>', 'test hook: delay before /metrics answers').argParser(nonNegativeNumber).default(0))
    .addOption(new Option('--metric-names <names>', "test hook: the KV gauge's names (vLLM renamed it)").choices(METRIC_NAMES).default('both'))
    .addOption(new Option('--health <mode>', 'test hook: how /health answers').choices(HEALTH_MODES).default('ok'))
    .addOption(new Option('--slow-factor <x>', 'test hook: stretch prefill and decode by this factor').argParser(positiveNumber).default(1))
    .addOption(new Option('--log-level <level>', 'log level (logs go to stderr)').choices(LOG_LEVELS).default('info'))
    .action(async (o: FakeWorkerFlags) => {
      // stdout carries the one readiness line; logs go to stderr so a parent can read stdout plainly.
      const logger = createLogger(o.logLevel, process.stderr);
      const worker = await startFakeWorker({
        id: o.id,
        model: o.model,
        host: o.host,
        port: o.port,
        kvCapacityTokens: o.kvCapacityTokens,
        blockTokens: o.blockTokens,
        prefillTokensPerS: o.prefillTokS,
        prefillOverheadMs: o.prefillOverheadMs,
        decodeMsPerToken: o.decodeMs,
        maxBatch: o.maxBatch,
        maxWaiting: o.maxWaiting,
        defaultOutputTokens: o.outputTokens,
        dcgm: o.dcgm === true,
        gpuMemoryMib: o.gpuMemoryMib,
        loraModules: (o.loraModules ?? '').split(',').map((x) => x.trim()).filter(Boolean),
        maxLoras: o.maxLoras,
        controls: {
          ...(o.kvUsage !== undefined ? { kv_usage: o.kvUsage } : {}),
          ...(o.gpuTemp !== undefined ? { gpu_temp_c: o.gpuTemp } : {}),
          metrics: o.metrics,
          metrics_delay_ms: Math.round(o.metricsDelayMs),
          metric_names: o.metricNames,
          health: o.health,
          slow_factor: o.slowFactor,
        },
        logger,
      });
      out.write(`${JSON.stringify({ msg: 'fake-worker listening', port: worker.port, host: o.host, url: worker.url, id: worker.id, model: o.model })}\n`);
      const stop = (signal: string) => {
        logger.info({ signal }, 'fake worker stopping');
        void worker.close().then(() => process.exit(0));
      };
      process.once('SIGINT', () => stop('SIGINT'));
      process.once('SIGTERM', () => stop('SIGTERM'));
    });
}
