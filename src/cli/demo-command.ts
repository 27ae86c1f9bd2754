/**
 * `kvgate demo`: starts fake workers and the gate in this process, drives multi-turn sessions
 * through the gate as Envoy would, and shows live where each session lands and the KV hit rate.
 * It ends by itself after `--turns` turns per session or `--duration` seconds (Ctrl-C ends it early).
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { hostPort, LOG_LEVELS, nonNegativeNumber, positiveIntUpTo, positiveNumber } from './arg-parsers.js';
import { ENVOY_MESSAGE_TIMEOUT_MS } from '../demo/envoy-client.js';
import { runDemo, type DemoState } from '../demo/run.js';
import { eventLine, frameLines, headerLines, summaryLines } from '../demo/view.js';
import { createLogger } from '../telemetry/logger.js';
import { startTracing } from '../telemetry/tracing.js';

/** The live view's refresh interval: smooth enough to watch, cheap on a terminal. */
const REDRAW_MS = 200;

export interface DemoOutput {
  write(text: string): void;
  isTTY?: boolean;
}

interface DemoFlags {
  workers: number;
  sessions: number;
  turns: number;
  duration: number;
  thinkMs: number;
  messageTimeoutMs: number;
  json?: boolean;
  logLevel: string;
  target?: string;
  admin?: string;
  upstream?: Record<string, string>;
  routingHeader: string;
}

/** `--upstream worker_1=http://10.0.0.7:8000` (repeatable): a cluster's model server. */
function upstream(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const at = value.indexOf('=');
  const cluster = value.slice(0, at).trim();
  const url = value.slice(at + 1).trim();
  if (at <= 0 || !/^https?:\/\/./.test(url)) throw new InvalidArgumentError('must be CLUSTER=URL, e.g. worker_1=http://127.0.0.1:8000');
  return { ...previous, [cluster]: url };
}

/** `host:port`, as Envoy's cluster for the gate would name it. */
export function registerDemoCommand(program: Command, out: DemoOutput = process.stdout): void {
  program
    .command('demo')
    .description('start fake workers and the gate (or use a running gate: --target), drive multi-turn chat sessions through it as Envoy would, and show where each session lands and the KV hit rate')
    .addOption(new Option('--workers <n>', 'fake workers').argParser(positiveIntUpTo(32)).default(3))
    .addOption(new Option('--sessions <n>', 'concurrent chat sessions').argParser(positiveIntUpTo(1000)).default(8))
    .addOption(new Option('--turns <n>', 'turns per session').argParser(positiveIntUpTo(1000)).default(6))
    .addOption(new Option('--duration <s>', 'stop starting turns after this many seconds').argParser(positiveNumber).default(60))
    .addOption(new Option('--think-ms <ms>', "mean pause between a session's turns").argParser(nonNegativeNumber).default(300))
    .addOption(
      new Option('--message-timeout-ms <ms>', "how long the Envoy stand-in waits for the gate's reply before routing by its fallback route (Envoy's message_timeout)")
        .argParser(positiveNumber)
        .default(ENVOY_MESSAGE_TIMEOUT_MS),
    )
    .addOption(new Option('--target <host:port>', 'drive a running gate (its ext_proc address) instead of starting one').argParser(hostPort))
    .addOption(new Option('--admin <url>', "with --target: the gate's admin API, to learn its clusters (default http://127.0.0.1:9090)").env('KVGATE_ADMIN'))
    .addOption(new Option('--upstream <cluster=url>', 'with --target: send this cluster\'s requests to this model server instead of a fake worker (repeatable)').argParser(upstream))
    .addOption(new Option('--routing-header <name>', "the header the gate names the cluster in (its routing.header)").default('x-kvgate-cluster'))
    .addOption(new Option('--json', 'print only the summary, as JSON'))
    .addOption(new Option('--log-level <level>', "the gate's and workers' log level (logs go to stderr)").choices(LOG_LEVELS).default('silent'))
    .action(async (o: DemoFlags) => {
      const live = out.isTTY === true && !o.json;
      const stop = new AbortController();
      const onSigint = () => stop.abort();
      process.once('SIGINT', onSigint);
      let drawn = 0;
      let timer: NodeJS.Timeout | undefined;
      const draw = (state: DemoState) => {
        const lines = frameLines(state);
        // Back to the frame's first line, clear below, redraw: the frame updates in place.
        out.write(`${drawn > 0 ? `\x1b[${drawn}F\x1b[0J` : ''}${lines.join('\n')}\n`);
        drawn = lines.length;
      };
      const logger = createLogger(o.logLevel, process.stderr);
      // The in-process gate exports its spans like `kvgate serve` does, when OTEL_* asks for it.
      const tracing = o.target === undefined ? await startTracing({ logger: logger.child({ component: 'tracing' }) }) : undefined;
      if (tracing?.enabled && !o.json) out.write(`tracing: ${tracing.description} (service "${process.env.OTEL_SERVICE_NAME ?? 'kvgate'}", span kvgate.route)\n`);
      try {
        if (live) out.write('\x1b[?25l');
        const summary = await runDemo({
          ...(o.target !== undefined ? { target: o.target } : {}),
          ...(o.admin !== undefined ? { admin: o.admin } : {}),
          ...(o.upstream !== undefined ? { upstreams: o.upstream } : {}),
          routingHeader: o.routingHeader,
          workers: o.workers,
          sessions: o.sessions,
          turns: o.turns,
          durationS: o.duration,
          thinkMs: o.thinkMs,
          messageTimeoutMs: o.messageTimeoutMs,
          logger,
          signal: stop.signal,
          onStart: (state) => {
            if (o.json) return;
            if (live) {
              draw(state);
              timer = setInterval(() => draw(state), REDRAW_MS);
            } else {
              out.write(`${headerLines(state).join('\n')}\n`);
            }
          },
          onEvent: (event, state) => {
            if (o.json) return;
            if (live) draw(state);
            else out.write(`${eventLine(event)}\n`);
          },
        });
        if (timer) clearInterval(timer);
        if (o.json) out.write(`${JSON.stringify(summary)}\n`);
        else out.write(`\n${summaryLines(summary).join('\n')}\n`);
      } finally {
        if (timer) clearInterval(timer);
        if (live) out.write('\x1b[?25h');
        process.off('SIGINT', onSigint);
        await tracing?.shutdown();
      }
    });
}
