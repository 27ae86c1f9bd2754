/**
 * How kvgate reaches Redis: one server or a Redis Cluster, plain or TLS, with or without AUTH.
 *
 *   redis://[user:password@]host:port[/db]            one server
 *   rediss://[user:password@]host:port[/db]           one server over TLS
 *   redis+cluster://[user:password@]host:port,host:port,…    a Redis Cluster (any reachable nodes
 *   rediss+cluster://[user:password@]host:port,host:port,…   seed the topology; the rest is discovered)
 *
 * AUTH comes from the URL (a password alone for `requirepass`, user and password for an ACL user).
 * TLS trusts the system CAs unless a CA file is given (`--store-ca-file`), and presents a client
 * certificate when one is given (`--store-cert-file` / `--store-key-file`, for `tls-auth-clients`).
 * It verifies the server's certificate against the host name the URL gives, or the one
 * `--store-tls-servername` names; for a cluster see `connectRedis`.
 */
import { createRequire } from 'node:module';
import { isIP, type Socket } from 'node:net';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { KvgateError } from '../errors.js';
import { redact, splitCredentials, STORE_SCHEME as SCHEME } from './store-spec.js';

/** PEM contents (already read) for TLS to Redis, and the name to verify its certificates against. */
export interface StoreTls {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  servername?: string;
}

export interface StoreEndpoint {
  cluster: boolean;
  tls: boolean;
  nodes: Array<{ host: string; port: number }>;
  username?: string;
  password?: string;
  db?: number;
}

export type RedisClient = Redis | Cluster;

/** Parses a store URL; throws KvgateError('invalid_config') with the reason when it is not one. */
export function parseStoreUrl(spec: string): StoreEndpoint {
  const m = SCHEME.exec(spec);
  if (!m) throw new KvgateError('invalid_config', `not a redis store URL: ${redact(spec)}`);
  const tls = m[1] === 'rediss';
  const cluster = m[2] !== undefined;
  // WHATWG URL takes one host only, and a password with '@', '/', '?' or '#' left unencoded
  // would be cut short, or read as hosts: the credentials run to the last '@' (the split `redact`
  // uses too, so an error shows no part of a password), then the host list and path follow.
  const { auth = '', rest: hostsAndPath } = splitCredentials(spec);
  const pathStart = hostsAndPath.search(/[/?#]/);
  const hostList = pathStart >= 0 ? hostsAndPath.slice(0, pathStart) : hostsAndPath;
  const path = pathStart >= 0 ? hostsAndPath.slice(pathStart) : '';
  const nodes = hostList.split(',').map((h) => parseHostPort(h, spec));
  if (nodes.length === 0 || (!cluster && nodes.length > 1)) {
    throw new KvgateError('invalid_config', `${redact(spec)}: several hosts need a redis+cluster:// or rediss+cluster:// URL`);
  }
  const out: StoreEndpoint = { cluster, tls, nodes };
  if (auth) {
    const colon = auth.indexOf(':');
    const user = decodeCredential(colon >= 0 ? auth.slice(0, colon) : auth, spec);
    const password = colon >= 0 ? decodeCredential(auth.slice(colon + 1), spec) : undefined;
    if (user) out.username = user;
    if (password !== undefined) out.password = password;
  }
  const db = /^\/(\d+)$/.exec(path.replace(/[?#].*$/, ''));
  if (db) {
    if (cluster && db[1] !== '0') throw new KvgateError('invalid_config', `${redact(spec)}: Redis Cluster has only database 0`);
    out.db = Number(db[1]);
  } else if (path && path !== '/') {
    throw new KvgateError('invalid_config', `${redact(spec)}: the path must be a database number`);
  }
  return out;
}

/** Percent-decodes a user name or password; a '%' not followed by two hex digits is refused. */
function decodeCredential(raw: string, spec: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw new KvgateError('invalid_config', `${redact(spec)}: a '%' in the user name or password must start a percent-encoded byte (write '%' itself as %25)`);
  }
}

function parseHostPort(raw: string, spec: string): { host: string; port: number } {
  const m = /^(\[[^\]\s]+\]|[^:\s]+)(?::(\d+))?$/.exec(raw.trim());
  if (!m) throw new KvgateError('invalid_config', `${redact(spec)}: "${raw}" is not host:port`);
  const port = m[2] === undefined ? 6379 : Number(m[2]);
  if (port < 1 || port > 65535) throw new KvgateError('invalid_config', `${redact(spec)}: bad port in "${raw}"`);
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
}


/**
 * Opens the client. `base` carries the fail-fast settings the store relies on (no offline queue,
 * the socket's silence limit); they apply to every node of a cluster too.
 *
 * A TLS cluster seeded by host name (a managed service's configuration endpoint, a Kubernetes
 * service): the cluster client resolves the seeds to IP addresses and reaches the other nodes by
 * the addresses CLUSTER SLOTS gives, usually IP addresses too, so a node certificate that names
 * hosts only (as managed services' do) failed verification on every node. Unless `servername`
 * names the host to verify, each node's certificate is verified against the address the client
 * reached it by and, failing that, against the first seed's host name. (Not ioredis README's way,
 * "Special Note: Aws Elasticache Clusters with TLS", of keeping the seeds unresolved: the seeds'
 * connections are then replaced by the slot map's at the first refresh, and without an offline
 * queue the cluster's ready check finds no node ready and starts over, for good. Nor a server name
 * sent to every node: a node whose certificate names only itself would fail it.)
 */
export function connectRedis(spec: string, base: RedisOptions, tlsFiles: StoreTls = {}): RedisClient {
  const ep = parseStoreUrl(spec);
  const hasFiles = tlsFiles.ca !== undefined || tlsFiles.cert !== undefined || tlsFiles.key !== undefined;
  if (hasFiles && !ep.tls) {
    throw new KvgateError('invalid_config', 'a store CA or client certificate needs a rediss:// or rediss+cluster:// store URL');
  }
  if (tlsFiles.servername !== undefined && !ep.tls) {
    throw new KvgateError('invalid_config', 'a store TLS server name needs a rediss:// or rediss+cluster:// store URL');
  }
  const servername = tlsFiles.servername;
  const seedName = ep.cluster && ep.tls && servername === undefined ? ep.nodes.find((n) => isIP(n.host) === 0)?.host : undefined;
  if ((tlsFiles.cert === undefined) !== (tlsFiles.key === undefined)) {
    throw new KvgateError('invalid_config', 'a store client certificate needs both --store-cert-file and --store-key-file');
  }
  const tls = ep.tls
    ? {
        ...(tlsFiles.ca !== undefined ? { ca: tlsFiles.ca } : {}),
        ...(tlsFiles.cert !== undefined ? { cert: tlsFiles.cert } : {}),
        ...(tlsFiles.key !== undefined ? { key: tlsFiles.key } : {}),
        ...(servername !== undefined ? { servername } : {}),
        ...(seedName !== undefined ? { checkServerIdentity: orHostName(seedName) } : {}),
      }
    : undefined;
  const auth = {
    ...(ep.username !== undefined ? { username: ep.username } : {}),
    ...(ep.password !== undefined ? { password: ep.password } : {}),
  };
  if (!ep.cluster) {
    const node = ep.nodes[0]!;
    return new Redis({ ...base, ...auth, host: node.host, port: node.port, ...(ep.db !== undefined ? { db: ep.db } : {}), ...(tls ? { tls } : {}) });
  }
  // A cluster's replica answers a write with MOVED, not READONLY (`reconnectOnError` is for a
  // single server's failover), and the cluster client reconnects its nodes itself.
  const { retryStrategy, enableOfflineQueue, enableAutoPipelining, reconnectOnError: _single, ...nodeOptions } = base;
  const options: ClusterOptions = {
    enableOfflineQueue: enableOfflineQueue ?? false,
    // A cluster-level option: commands are pipelined per node.
    ...(enableAutoPipelining !== undefined ? { enableAutoPipelining } : {}),
    // The same capped backoff as a single server while the whole cluster is unreachable.
    clusterRetryStrategy: retryStrategy ?? ((times: number) => Math.min(50 * times, 1000)),
    // After a failover the dead master's slots move to its replica: re-read the slot map soon
    // instead of retrying the dead address (the store's deadline bounds every command anyway).
    retryDelayOnFailover: 50,
    retryDelayOnClusterDown: 50,
    slotsRefreshTimeout: 1000,
    slotsRefreshInterval: 2000,
    redisOptions: { ...nodeOptions, ...auth, ...(tls ? { tls, Connector: LateErrorsHeard as unknown as NonNullable<RedisOptions['Connector']> } : {}) },
  };
  return new Cluster(ep.nodes, options);
}

/**
 * The connector ioredis uses for one server, with a lasting error listener on every socket it
 * makes (see `keepLateSocketErrors`). A cluster client's slot-map refresher is a connection of its
 * own that ioredis makes and ends inside the refresh, out of reach of `closeRedis`: a TLS refresher
 * ended mid-handshake could emit the server's alert after ioredis's one-shot listener was used,
 * an uncaught exception (seen once in CI's Node 22 run). ioredis's own listener still sees the
 * first error of every socket; only later ones, on a socket it has given up, are dropped.
 * ioredis exports the class's type but not the class, so it is loaded from its file.
 */
type StandaloneConnectorClass = typeof import('ioredis/built/connectors/StandaloneConnector.js').default;
const { default: StandaloneConnector } = createRequire(import.meta.url)('ioredis/built/connectors/StandaloneConnector.js') as { default: StandaloneConnectorClass };
class LateErrorsHeard extends StandaloneConnector {
  override async connect(...args: Parameters<InstanceType<StandaloneConnectorClass>['connect']>) {
    const stream = await super.connect(...args);
    stream.on('error', ignoreError);
    return stream;
  }
}

/** TLS identity check: the host the connection was made to, or else `name`. */
function orHostName(name: string): (host: string, cert: PeerCertificate) => Error | undefined {
  return (host, cert) => {
    const err = checkServerIdentity(host, cert);
    return err === undefined ? undefined : checkServerIdentity(name, cert) === undefined ? undefined : err;
  };
}

/**
 * Closes the connection for good. A Cluster client needs more than `disconnect()`: its slot-map
 * refresh re-arms its own timer when it completes (`resetNodesRefreshInterval`'s `nextRound` in
 * ioredis's cluster/index.js), so a refresh still on its way when `disconnect()` cleared the timer
 * arms it again, and it then fires every `slotsRefreshInterval` for ever, keeping the process
 * alive (a test process hung on it after a failover). So once disconnected, any timer it arms
 * there is cleared as it is set.
 */
export function closeRedis(client: RedisClient): void {
  keepLateSocketErrors(client);
  client.disconnect();
  if (client instanceof Cluster) {
    Object.defineProperty(client, 'slotsTimer', {
      configurable: true,
      get: () => null,
      set: (timer: unknown) => {
        if (timer) clearTimeout(timer as NodeJS.Timeout);
      },
    });
  }
}

/**
 * Gives every socket `disconnect()` is about to end an error listener that stays. ioredis listens
 * once for a socket's error; a TLS socket ended mid-handshake can emit two: the handshake's own
 * failure (say, a server certificate that fails verification), then the alert the server sends
 * back for our early close (ERR_SSL_TLSV1_ALERT_DECODE_ERROR), which, unheard, crashed the process
 * as an uncaught exception. The first already reached the client's error handler, and nobody
 * wants a closed client's errors, so the later ones are dropped. The socket is the connector's:
 * the client's own `stream` is assigned one step later, so a socket made just before the close is
 * only there.
 */
function keepLateSocketErrors(client: RedisClient): void {
  const nodes = client instanceof Cluster ? client.nodes('all') : [client];
  for (const node of nodes) {
    const stream = (node as unknown as { connector?: { stream?: Socket } }).connector?.stream;
    stream?.on('error', ignoreError);
  }
}

function ignoreError(): void {}
