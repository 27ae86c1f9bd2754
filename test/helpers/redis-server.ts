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
 * on its port (plain TCP off) and `url` is rediss://. `pickPort` stands in for freePort() (tests of
 * this helper hand it a port that is already taken).
 */
export async function startRedis(
  extraArgs: string[] = [],
  opts: { tls?: RedisTlsFiles; pickPort?: () => Promise<number> } = {},
): Promise<TestRedis> {
  const bin = redisServerBinary();
  let proc: ChildProcess | undefined;
  const tls = opts.tls;
  const portArgs = (port: number) =>
    tls
      ? ['--port', '0', '--tls-port', String(port), '--tls-cert-file', tls.cert, '--tls-key-file', tls.key, '--tls-ca-cert-file', tls.ca, '--tls-auth-clients', tls.authClients ?? 'yes']
      : ['--port', String(port)];

  const launch = async (port: number) => {
    const p = spawn(bin, [...portArgs(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extraArgs], {
      stdio: 'ignore',
    });
    proc = p;
    // A TLS server asks for a client certificate (tls-auth-clients yes), which this helper has
    // none of: such a server is told from another by staying up instead.
    await ensureOwnServer(p, port, tls ? undefined : dialPlain);
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
  // A restart keeps its port: the tests' clients point at it.
  const port = await onFreshPorts(opts.pickPort ?? freePort, launch);
  return {
    port,
    url: `${tls ? 'rediss' : 'redis'}://127.0.0.1:${port}`,
    kill,
    restart: () => launch(port),
    stop: kill,
  };
}

/** Opens a connection to a Redis on `port` at 127.0.0.1 (plain TCP, or TLS for a TLS-only server). */
export type DialRedis = (port: number) => net.Socket;

export const dialPlain: DialRedis = (port) => net.connect(port, '127.0.0.1');

/**
 * Waits until `port` listens and makes sure the server answering there is `p`; else kills `p` and
 * throws. freePort() releases its port before redis-server binds it, so another process (a test
 * file running beside this one) can take the port in between; `p` then fails to bind and exits
 * while the port answers for the other, whose Redis vanishes when its test ends (a test once
 * waited for ever on a Redis that was gone). A Redis says its process id (INFO server) once it
 * has bound every port it was given (a cluster node's bus port too), so a matching id means both
 * are `p`'s. With no `dial`, or a server that will not say (a password, an ACL without INFO), `p`
 * counts as the owner if it is still up a moment later: one that failed to bind has exited by then.
 */
export async function ensureOwnServer(p: ChildProcess, port: number, dial: DialRedis | undefined): Promise<void> {
  try {
    await waitForPort(port, 5000, p);
    const pid = dial ? await serverPid(port, dial) : undefined;
    const ours = pid === undefined ? await aliveAfter(p, 100) : pid === p.pid;
    if (!ours || p.exitCode !== null) throw new Error(`redis-server could not take port ${port}: another process holds it`);
  } catch (err) {
    if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    throw err;
  }
}

/**
 * Runs `start` on ports from `pick` and, when it throws (a port was taken), on fresh ones: three
 * tries in all, so a machine where ports really run out fails with the last error rather than
 * looping. Returns the ports that worked.
 */
export async function onFreshPorts<T>(pick: () => Promise<T>, start: (ports: T) => Promise<void>, tries = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const ports = await pick();
    try {
      await start(ports);
      return ports;
    } catch (err) {
      if (attempt >= tries) throw err;
    }
  }
}

/** The process id the plain Redis on `port` reports (INFO server), or undefined when it will not say. */
function serverPid(port: number, dial: DialRedis): Promise<number | undefined> {
  return new Promise((resolve) => {
    const s = dial(port);
    let text = '';
    const done = (pid: number | undefined) => {
      s.destroy();
      resolve(pid);
    };
    s.setTimeout(2000, () => done(undefined));
    s.once('error', () => done(undefined));
    s.on('data', (d) => {
      text += d.toString('latin1');
      const m = /process_id:(\d+)/.exec(text);
      if (m) done(Number(m[1]));
      // An error reply (NOAUTH with --requirepass, an ACL without INFO): no id to compare.
      else if (text.startsWith('-') && text.includes('\r\n')) done(undefined);
    });
    s.write('INFO server\r\n');
  });
}

/** Whether `p` is still running `ms` from now (a server that failed to bind has exited by then). */
async function aliveAfter(p: ChildProcess, ms: number): Promise<boolean> {
  await new Promise((r) => setTimeout(r, ms));
  return p.exitCode === null;
}

/** With `proc`, a server that has exited is not waited for (it failed to bind: a port was taken). */
export async function waitForPort(port: number, timeoutMs: number, proc?: ChildProcess): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (proc && (proc.exitCode !== null || proc.signalCode !== null)) throw new Error(`redis-server for port ${port} exited before it listened`);
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
