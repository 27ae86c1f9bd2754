/**
 * Real redis-server processes for tests, each on its own free port with persistence off.
 * `.ci/run` installs redis-server; a missing binary fails loudly rather than skipping silently.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { freePort } from '../../src/util/free-port.js';

export interface TestRedis {
  port: number;
  url: string;
  /** SIGKILL the server (a crash, as far as clients can tell). */
  kill(): Promise<void>;
  /** Start it again on the same port (empty, as after a crash without persistence). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export function redisServerBinary(): string {
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim();
  } catch {
    throw new Error('redis-server is not installed: run `apt-get install -y redis-server` (.ci/run does this)');
  }
}

export interface RedisTlsFiles {
  cert: string;
  key: string;
  ca: string;
  /** redis-server's tls-auth-clients: `yes` (its default) requires a client certificate. */
  authClients?: 'yes' | 'no' | 'optional';
}

/**
 * `extraArgs` are redis-server flags (e.g. `--requirepass`); with `tls` the server speaks only TLS
 * on its port (plain TCP off) and `url` is rediss://.
 */
export async function startRedis(extraArgs: string[] = [], opts: { tls?: RedisTlsFiles } = {}): Promise<TestRedis> {
  const bin = redisServerBinary();
  const port = await freePort();
  let proc: ChildProcess | undefined;
  const tls = opts.tls;
  const portArgs = tls
    ? ['--port', '0', '--tls-port', String(port), '--tls-cert-file', tls.cert, '--tls-key-file', tls.key, '--tls-ca-cert-file', tls.ca, '--tls-auth-clients', tls.authClients ?? 'yes']
    : ['--port', String(port)];

  const launch = async () => {
    proc = spawn(bin, [...portArgs, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extraArgs], {
      stdio: 'ignore',
    });
    await waitForPort(port, 5000);
  };
  const kill = async () => {
    const p = proc;
    proc = undefined;
    if (!p || p.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      p.once('exit', () => resolve());
      p.kill('SIGKILL');
    });
  };
  await launch();
  return {
    port,
    url: `${tls ? 'rediss' : 'redis'}://127.0.0.1:${port}`,
    kill,
    restart: launch,
    stop: kill,
  };
}

export async function waitForPort(port: number, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > until) throw new Error(`redis-server did not listen on ${port} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
