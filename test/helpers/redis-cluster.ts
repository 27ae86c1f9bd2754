/**
 * A real Redis Cluster for tests: redis-server processes with cluster-enabled on free ports (data
 * and bus ports both picked free), joined with `redis-cli --cluster create`, masters with one
 * replica each. Set up once per test file: it takes a few seconds. With `tls`, every node speaks TLS
 * only, on its data port and its cluster bus (clients need no certificate of their own). Each node
 * is checked to be the server on its ports, as startRedis checks its one (see ensureOwnServer).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tlsSocket from 'node:tls';
import { promisify } from 'node:util';
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { freePort } from '../../src/util/free-port.js';
import { dialPlain, ensureOwnServer, onFreshPorts, redisServerBinary, type DialRedis } from './redis-server.js';

const run = promisify(execFile);

export interface ClusterNode {
  port: number;
  busPort: number;
  /** The redis-server process's id (what the node's INFO server says when it is this node). */
  readonly pid: number | undefined;
  /** SIGKILL: a crash. */
  kill(): Promise<void>;
  readonly alive: boolean;
  /** A short-lived plain client to this node (call quit() when done). */
  client(): Redis;
}

export interface TestCluster {
  nodes: ClusterNode[];
  /** The store URL seeded with the first masters. */
  url: string;
  /** The node that currently serves `slot` as master. */
  masterOf(slot: number): Promise<ClusterNode>;
  /** Waits until every live node sees the cluster as ok and `slot` has a live master. */
  waitHealthy(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

/** PEM files for a TLS cluster; `servername` is a name the server certificate holds, for the helper's own clients. */
export interface ClusterTls {
  cert: string;
  key: string;
  ca: string;
  servername: string;
}

/**
 * `pickPort` stands in for freePort() (tests of this helper hand it ports that are already taken);
 * whatever it gives, no two nodes get the same port.
 */
export async function startRedisCluster(
  opts: { masters?: number; replicas?: number; nodeTimeoutMs?: number; tls?: ClusterTls; pickPort?: () => Promise<number> } = {},
): Promise<TestCluster> {
  const masters = opts.masters ?? 3;
  const replicas = opts.replicas ?? 1;
  const count = masters * (1 + replicas);
  const bin = redisServerBinary();
  const dirs: string[] = [];
  const tls = opts.tls;
  const portArgs = (port: number) =>
    tls
      ? ['--port', '0', '--tls-port', String(port), '--tls-cluster', 'yes', '--tls-replication', 'yes', '--tls-cert-file', tls.cert, '--tls-key-file', tls.key, '--tls-ca-cert-file', tls.ca, '--tls-auth-clients', 'no']
      : ['--port', String(port)];
  const caPem = tls ? readFileSync(tls.ca) : undefined;
  const clientTls = tls ? { tls: { ca: caPem, servername: tls.servername } } : {};
  // TLS nodes take clients without a certificate (tls-auth-clients no), so they say their id too.
  const dial: DialRedis = tls ? (port) => tlsSocket.connect({ port, host: '127.0.0.1', ca: caPem, servername: tls.servername }) : dialPlain;

  // Every port handed out, including those of failed tries: a node moving to a new port must not
  // take one another node of this cluster is about to bind.
  const handedOut = new Set<number>();
  const pickPort = opts.pickPort ?? freePort;
  const distinctPort = async (): Promise<number> => {
    for (;;) {
      const port = await pickPort();
      if (!handedOut.has(port)) {
        handedOut.add(port);
        return port;
      }
    }
  };
  // All first tries' ports up front, data ports then bus ports, as before nodes start in parallel.
  const firstTries: Array<{ port: number; busPort: number }> = [];
  for (let i = 0; i < count; i++) firstTries.push({ port: await distinctPort(), busPort: 0 });
  for (const t of firstTries) t.busPort = await distinctPort();

  const startNode = async (first: { port: number; busPort: number }): Promise<ClusterNode & { proc: ChildProcess }> => {
    let proc: ChildProcess | undefined;
    let tried = false;
    const { port, busPort } = await onFreshPorts(
      async () => {
        if (!tried) {
          tried = true;
          return first;
        }
        return { port: await distinctPort(), busPort: await distinctPort() };
      },
      async (ports) => {
        // A directory a try: a failed one may have written its nodes.conf there.
        const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-cluster-'));
        dirs.push(dir);
        proc = spawn(
          bin,
          [
            ...portArgs(ports.port), '--cluster-port', String(ports.busPort), '--bind', '127.0.0.1',
            '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
            // 3 s, not 1: on two busy cores a master stalled past 1 s was failed over in the middle of a
            // test that counts the calls on it (13 of 20 landed there once). A killed master is still
            // replaced within a few seconds.
            '--cluster-node-timeout', String(opts.nodeTimeoutMs ?? 3000),
            '--dir', dir, '--save', '', '--appendonly', 'no',
          ],
          { stdio: 'ignore' },
        );
        await ensureOwnServer(proc, ports.port, dial);
      },
    );
    const p = proc!;
    const node = {
      port,
      busPort,
      proc: p,
      pid: p.pid,
      get alive() {
        return p.exitCode === null && p.signalCode === null;
      },
      async kill() {
        if (!node.alive) return;
        await new Promise<void>((resolve) => {
          p.once('exit', () => resolve());
          p.kill('SIGKILL');
        });
      },
      client: () => new Redis({ port, host: '127.0.0.1', lazyConnect: false, maxRetriesPerRequest: 1, ...clientTls }),
    };
    return node;
  };
  const started = await Promise.allSettled(firstTries.map(startNode));
  const nodes = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    // The nodes that did start would outlive the test file otherwise.
    await Promise.all(nodes.map((n) => n.kill()));
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
    throw failed.reason;
  }
  const cliTls = tls ? ['--tls', '--cacert', tls.ca, '--sni', tls.servername] : [];
  await run('redis-cli', [...cliTls, '--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', String(replicas), '--cluster-yes'], {
    timeout: 30_000,
  });

  const query = async <T>(node: ClusterNode, fn: (r: Redis) => Promise<T>): Promise<T> => {
    const r = node.client();
    try {
      return await fn(r);
    } finally {
      r.disconnect();
    }
  };

  const cluster: TestCluster = {
    nodes,
    url: `${tls ? 'rediss' : 'redis'}+cluster://${nodes.slice(0, 2).map((n) => `127.0.0.1:${n.port}`).join(',')}`,
    async masterOf(slot) {
      for (const n of nodes.filter((x) => x.alive)) {
        const slots = (await query(n, (r) => r.call('CLUSTER', 'SLOTS'))) as Array<[number, number, [string, number, ...unknown[]]]>;
        for (const [from, to, master] of slots) {
          if (slot >= from && slot <= to) {
            const owner = nodes.find((x) => x.port === Number(master[1]));
            if (owner?.alive) return owner;
          }
        }
      }
      throw new Error(`no live master serves slot ${slot}`);
    },
    async waitHealthy(timeoutMs = 20_000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const live = nodes.filter((n) => n.alive);
        const states = await Promise.all(live.map((n) => query(n, (r) => r.call('CLUSTER', 'INFO')).catch(() => '')));
        const synced = await Promise.all(
          live.map((n) =>
            query(n, (r) => r.info('replication'))
              .then((info) => !/role:slave/.test(info) || /master_link_status:up/.test(info))
              .catch(() => false),
          ),
        );
        if (states.every((s) => /cluster_state:ok/.test(String(s))) && synced.every(Boolean)) return;
        if (Date.now() > until) throw new Error('redis cluster did not become healthy');
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    async stop() {
      await Promise.all(nodes.map((n) => n.kill()));
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    },
  };
  await cluster.waitHealthy();
  return cluster;
}
