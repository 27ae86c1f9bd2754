/** What a benchmark ran on, printed with every result so numbers are never read without it. */
import { readFileSync } from 'node:fs';
import os from 'node:os';

export interface Machine {
  cpus: number;
  cpu_model: string;
  memory_gib: number;
  node: string;
  os: string;
  /** One-minute load average when described: other work on the machine skews every timing. */
  load_avg: number;
  /**
   * MB/s at which fresh memory could be allocated and first written (1 MiB buffers). Bare metal
   * does several GB/s; a VM that backs pages lazily can be 10-100× slower, and then every
   * body-sized allocation on the request path costs far more than it would in production.
   */
  fresh_memory_mb_s: number;
}

export function describeMachine(): Machine {
  let model = os.cpus()[0]?.model ?? 'unknown';
  try {
    const line = readFileSync('/proc/cpuinfo', 'utf8').split('\n').find((l) => l.startsWith('model name'));
    if (line) model = line.slice(line.indexOf(':') + 1).trim();
  } catch {
    // Not Linux: os.cpus() has it.
  }
  return {
    load_avg: Math.round((os.loadavg()[0] ?? 0) * 100) / 100,
    fresh_memory_mb_s: freshMemoryMbPerS(),
    cpus: os.availableParallelism(),
    cpu_model: model,
    memory_gib: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
  };
}

function freshMemoryMbPerS(): number {
  const mib = 32;
  const t0 = performance.now();
  for (let i = 0; i < mib; i++) Buffer.allocUnsafeSlow(1 << 20).fill(i);
  return Math.round(mib / ((performance.now() - t0) / 1000));
}

export function machineLine(m: Machine): string {
  return `${m.cpus} CPUs (${m.cpu_model}), ${m.memory_gib} GiB, Node ${m.node}, ${m.os}; load average ${m.load_avg}, fresh memory ${m.fresh_memory_mb_s.toLocaleString('en-US')} MB/s`;
}
