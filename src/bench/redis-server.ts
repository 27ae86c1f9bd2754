/**
 * A throwaway redis-server for `kvgate bench --stores redis` when no `--redis URL` is given: on a
 * free port, bound to loopback, persistence off, killed when the run ends.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { freePort } from '../util/free-port.js';

export interface BenchRedis {
  url: string;
  version: string;
  /** redis-server's process id (for its CPU time in scripts/scale-gate.ts). */
  pid: number | undefined;
  stop(): Promise<void>;
}

/** The redis-server on PATH, or undefined. */
export function findRedisServer(): string | undefined {
  try {
    const path = execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim();
    return path || undefined;
  } catch {
    return undefined;
  }
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

export async function startBenchRedis(binary: string): Promise<BenchRedis> {
  const port = await freePort();
  const proc: ChildProcess = spawn(binary, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  let exited = false;
  proc.once('exit', () => (exited = true));
  const until = Date.now() + 5000;
  while (!(await canConnect(port))) {
    if (exited || Date.now() > until) {
      proc.kill('SIGKILL');
      throw new Error(`redis-server (${binary}) did not listen on port ${port}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  let version = 'unknown';
  try {
    version = /v=(\S+)/.exec(execFileSync(binary, ['--version'], { encoding: 'utf8' }))?.[1] ?? version;
  } catch {
    // The version is a label in the report; the run does not need it.
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    version,
    pid: proc.pid,
    stop: () =>
      new Promise<void>((resolve) => {
        if (exited) return resolve();
        proc.once('exit', () => resolve());
        proc.kill('SIGKILL');
      }),
  };
}
