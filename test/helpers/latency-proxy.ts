/**
 * A TCP proxy on a free port that delays every chunk in both directions by an adjustable latency
 * (order kept): a slow Redis, as the gate sees it, without touching Redis itself. It can also cut
 * the network: drop every connection and refuse new ones while Redis keeps its data; or black-hole
 * it: keep every connection open and drop every byte (a partition that loses packets and closes
 * nothing, so neither side notices).
 */
import net from 'node:net';

export interface LatencyProxy {
  port: number;
  /** host:port to give clients instead of the target's. */
  address: string;
  /** Delay applied to chunks sent from now on (ms). */
  setLatency(ms: number): void;
  /** true: drop every connection now and refuse new ones; false: accept again. */
  setDown(down: boolean): void;
  /**
   * Where connections made from now on lead (open ones stay where they are): an address that moved
   * to another server, as a DNS name or a virtual IP moves to the new master after a failover.
   */
  setTarget(port: number, host?: string): void;
  /** true: drop every byte in both directions from now on, connections left open; false: deliver again. */
  setBlackhole(on: boolean): void;
  /** Connections accepted so far (a client that replaced its connection made a new one). */
  readonly accepted: number;
  close(): Promise<void>;
}

/** Chunks of one direction, released in order once due; `undefined` is the sender's end (FIN). */
class DelayedPipe {
  private readonly queue: Array<{ due: number; chunk: Buffer | undefined }> = [];
  private timer: NodeJS.Timeout | undefined;
  private lastDue = 0;

  constructor(
    private readonly to: net.Socket,
    private readonly latency: () => number,
    private readonly blackholed: () => boolean,
  ) {}

  push(chunk: Buffer | undefined): void {
    if (chunk !== undefined && this.blackholed()) return;
    const due = Math.max(Date.now() + this.latency(), this.lastDue);
    this.lastDue = due;
    this.queue.push({ due, chunk });
    this.schedule();
  }

  private schedule(): void {
    if (this.timer || this.queue.length === 0) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const now = Date.now();
      while (this.queue.length > 0 && this.queue[0]!.due <= now) {
        const { chunk } = this.queue.shift()!;
        if (this.to.destroyed) continue;
        if (chunk === undefined) this.to.end();
        else this.to.write(chunk);
      }
      this.schedule();
    }, Math.max(0, this.queue[0]!.due - Date.now()));
  }

  stop(): void {
    clearTimeout(this.timer);
    this.queue.length = 0;
  }
}

export async function startLatencyProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<LatencyProxy> {
  let latency = 0;
  let down = false;
  let blackhole = false;
  let accepted = 0;
  let target = { port: targetPort, host: targetHost };
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    if (down) {
      client.destroy();
      return;
    }
    accepted++;
    const upstream = net.connect(target.port, target.host);
    sockets.add(client);
    sockets.add(upstream);
    const toUpstream = new DelayedPipe(upstream, () => latency, () => blackhole);
    const toClient = new DelayedPipe(client, () => latency, () => blackhole);
    client.on('data', (c: Buffer) => toUpstream.push(c));
    upstream.on('data', (c: Buffer) => toClient.push(c));
    // A side that closes gracefully (FIN) has its data delivered first, then its FIN, a latency
    // later, as TCP would: a server's last replies before it closes are not lost in the proxy.
    let ended = false;
    const endOf = (pipe: DelayedPipe) => () => {
      ended = true;
      pipe.push(undefined);
    };
    client.on('end', endOf(toUpstream));
    upstream.on('end', endOf(toClient));
    const end = () => {
      toUpstream.stop();
      toClient.stop();
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    // A close after a FIN lets the other direction drain; an abrupt one (or both sides done) ends all.
    const closed = () => {
      if (!ended || (client.destroyed && upstream.destroyed)) end();
    };
    client.on('close', closed);
    upstream.on('close', closed);
    client.on('error', end);
    upstream.on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    address: `127.0.0.1:${port}`,
    setLatency(ms) {
      latency = ms;
    },
    setDown(value) {
      down = value;
      if (down) for (const s of sockets) s.destroy();
    },
    setTarget(port, host = '127.0.0.1') {
      target = { port, host };
    },
    setBlackhole(on) {
      blackhole = on;
    },
    get accepted() {
      return accepted;
    },
    close() {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
