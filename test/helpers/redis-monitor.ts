/**
 * Redis MONITOR on a raw socket, for tests that check which commands reach Redis.
 *
 * ioredis's own `monitor()` can fail on a busy server: when MONITOR's `+OK` and the first
 * monitored command arrive in one read, ioredis handles the second reply before its connection is
 * in monitoring mode, finds no command waiting for it, and throws "Command queue state error" as
 * an uncaught exception (seen once in CI's Node 22 run, with a gate polling Redis every 50 ms).
 * Here the lines are read as text, whatever arrives in one read.
 */
import net from 'node:net';

export interface MonitoredCommand {
  /** Who sent it: `lua` for a command a script ran, else the client's address. */
  source: string;
  /** The command and its arguments, unquoted. */
  args: string[];
}

export interface RedisMonitor {
  readonly commands: MonitoredCommand[];
  /** Resolves once Redis has acknowledged MONITOR: commands from then on are seen. */
  ready: Promise<void>;
  close(): void;
}

export function monitorRedis(port: number, host = '127.0.0.1'): RedisMonitor {
  const commands: MonitoredCommand[] = [];
  const socket = net.connect(port, host);
  // A Redis that goes away while monitored (the test stops it) is not a failure of the test.
  socket.on('error', () => {});
  let buffered = '';
  let acknowledged: () => void = () => {};
  const ready = new Promise<void>((resolve, reject) => {
    acknowledged = resolve;
    socket.once('error', reject);
  });
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    let nl: number;
    while ((nl = buffered.indexOf('\r\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 2);
      if (line === '+OK') acknowledged();
      else {
        const c = parseMonitorLine(line);
        if (c) commands.push(c);
      }
    }
  });
  socket.write('MONITOR\r\n');
  return { commands, ready, close: () => socket.destroy() };
}

/**
 * One MONITOR line: `+<time> [<db> <source>] "arg" "arg" ...`, each argument quoted with C-style
 * escapes (Redis `sdscatrepr`: \\ \" \n \r \t \a \b and \xHH). Undefined for anything else.
 */
export function parseMonitorLine(line: string): MonitoredCommand | undefined {
  const m = /^\+\d+\.\d+ \[\d+ ([^\]]+)\] (.*)$/.exec(line);
  if (!m) return undefined;
  const rest = m[2]!;
  const args: string[] = [];
  let i = 0;
  while (i < rest.length) {
    if (rest[i] === ' ') {
      i++;
      continue;
    }
    if (rest[i] !== '"') return undefined;
    i++;
    // Bytes, decoded as UTF-8 at the end: Redis escapes every byte outside printable ASCII.
    const bytes: number[] = [];
    while (i < rest.length && rest[i] !== '"') {
      if (rest[i] === '\\' && i + 1 < rest.length) {
        const e = rest[i + 1]!;
        if (e === 'x' && i + 3 < rest.length) {
          bytes.push(parseInt(rest.slice(i + 2, i + 4), 16));
          i += 4;
          continue;
        }
        bytes.push((({ n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b' } as Record<string, string>)[e] ?? e).charCodeAt(0));
        i += 2;
        continue;
      }
      bytes.push(rest.charCodeAt(i));
      i++;
    }
    i++;
    args.push(Buffer.from(bytes).toString('utf8'));
  }
  return { source: m[1]!, args };
}
