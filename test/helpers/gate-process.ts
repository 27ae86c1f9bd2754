/**
 * kvgate as a separate OS process, started exactly as a user starts it (`bin/kvgate.js serve`), on
 * free ports. Used where a test needs real separate replicas or a process to kill.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { stringify } from 'yaml';
import { KVGATE } from './kvgate-cli.js';


export interface GateProcess {
  grpcPort: number;
  adminPort: number;
  target: string;
  proc: ChildProcess;
  /** Log lines (parsed JSON) seen so far. */
  lines: Array<Record<string, unknown>>;
  stop(): Promise<number | null>;
  kill(): Promise<void>;
}

/** Writes a config object to a temp YAML file and returns its path. */
export function writeConfig(config: unknown): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-cfg-'));
  const file = path.join(dir, 'kvgate.yaml');
  writeFileSync(file, stringify(config));
  return file;
}

export async function startGateProcess(args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 60_000): Promise<GateProcess> {
  const proc = spawn(process.execPath, [...KVGATE, 'serve', '--grpc-port', '0', '--admin-port', '0', '--grpc-host', '127.0.0.1', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Array<Record<string, unknown>> = [];
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const ready = new Promise<{ grpcPort: number; adminPort: number }>((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => {
      // A gate that never said it was serving must not outlive the test and hang the runner.
      proc.kill('SIGKILL');
      reject(new Error(`kvgate did not start in ${timeoutMs} ms: ${stderr}`));
    }, timeoutMs);
    proc.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          const rec = JSON.parse(line) as Record<string, unknown>;
          lines.push(rec);
          if (rec['msg'] === 'kvgate serving') {
            clearTimeout(timer);
            resolve({ grpcPort: rec['grpc_port'] as number, adminPort: rec['admin_port'] as number });
          }
        } catch {
          // not a log line
        }
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`kvgate exited with ${code}: ${stderr}`));
    });
  });
  const { grpcPort, adminPort } = await ready;
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  return {
    grpcPort,
    adminPort,
    target: `127.0.0.1:${grpcPort}`,
    proc,
    lines,
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill('SIGTERM');
      return exited;
    },
    async kill() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill('SIGKILL');
      await exited;
    },
  };
}
