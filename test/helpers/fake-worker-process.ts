/**
 * `kvgate fake-worker` as a real separate process on a free port, driven through its
 * `POST /control` test hooks (forced KV use, metrics failures).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { KVGATE } from './kvgate-cli.js';


export interface FakeWorkerProcess {
  url: string;
  metricsUrl: string;
  control(fields: Record<string, unknown>): Promise<void>;
  stop(): Promise<void>;
}

export async function startFakeWorkerProcess(id: string, args: string[] = []): Promise<FakeWorkerProcess> {
  const proc: ChildProcess = spawn(process.execPath, [...KVGATE, 'fake-worker', '--port', '0', '--id', id, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const port = await new Promise<number>((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => reject(new Error(`fake-worker ${id} did not start`)), 60_000);
    proc.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      for (const line of buf.split('\n')) {
        if (!line.includes('fake-worker listening')) continue;
        clearTimeout(timer);
        resolve((JSON.parse(line) as { port: number }).port);
      }
    });
    proc.once('exit', (code) => reject(new Error(`fake-worker ${id} exited with ${code}`)));
  });
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    metricsUrl: `${url}/metrics`,
    async control(fields) {
      const res = await fetch(`${url}/control`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(fields) });
      if (!res.ok) throw new Error(`control answered ${res.status}: ${await res.text()}`);
    },
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      await new Promise<void>((resolve) => {
        proc.once('exit', () => resolve());
        proc.kill('SIGTERM');
      });
    },
  };
}
