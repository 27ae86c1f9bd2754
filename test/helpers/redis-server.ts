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
  let port = await freePort();
  let proc: ChildProcess | undefined;
  const tls = opts.tls;
  const portArgs = () =>
    tls
      ? ['--port', '0', '--tls-port', String(port), '--tls-cert-file', tls.cert, '--tls-key-file', tls.key, '--tls-ca-cert-file', tls.ca, '--tls-auth-clients', tls.authClients ?? 'yes']
      : ['--port', String(port)];

  const launch = async () => {
    const p = spawn(bin, [...portArgs(), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extraArgs], {
      stdio: 'ignore',
    });
    proc = p;
    await waitForPort(port, 5000);
    // Listening, but maybe not this server: another process (a test file running beside this one)
    // can take the port between freePort() and the spawn; this one then fails to bind and exits,
    // while the port answers for the other, whose Redis vanishes when its test ends (a test here
    // once waited for ever on a Redis that was gone). Plain servers say their process id.
    const pid = tls ? undefined : await serverPid(port);
    const ours = pid === undefined ? await aliveAfter(p, 100) : pid === p.pid;
    if (!ours || p.exitCode !== null) {
      if (p.exitCode === null) p.kill('SIGKILL');
      throw new Error(`redis-server could not take port ${port}: another process holds it`);
    }
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
  // A new port if the first was taken (a restart keeps its port: the tests' clients point at it).
  for (let attempt = 1; ; attempt++) {
    try {
      await launch();
      break;
    } catch (err) {
      if (attempt >= 3) throw err;
      port = await freePort();
    }
  }
  return {
    port,
    url: `${tls ? 'rediss' : 'redis'}://127.0.0.1:${port}`,
    kill,
    restart: launch,
    stop: kill,
  };
}

/** The process id the plain Redis on `port` reports (INFO server), or undefined when it will not say. */
function serverPid(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
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
