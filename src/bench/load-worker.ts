/**
 * Entry of a load-client thread. The load runs in worker threads so that the gate under test has
 * the main thread's event loop to itself, as it would in its own process: the client's cost lands
 * on another core (where there is one) instead of inflating the gate's latencies.
 */
import { parentPort } from 'node:worker_threads';
import { LoadClient, type LoadPlan } from './load-client.js';

export type ToWorker =
  | { type: 'start'; plan: LoadPlan }
  | { type: 'mark' }
  | { type: 'stop' }
  /** How many requests completed in the measured window so far. */
  | { type: 'count' }
  /** The target is going away: drop its connection. */
  | { type: 'forget'; target: string }
  | { type: 'close' };
export type FromWorker =
  | { type: 'started' }
  | { type: 'result'; result: import('./load-client.js').LoadResult }
  | { type: 'count'; completed: number }
  | { type: 'error'; message: string };

const port = parentPort;
if (!port) throw new Error('load-worker.ts runs only as a worker thread');

const clients = new Map<string, LoadClient>();
let running: ReturnType<LoadClient['start']> | undefined;

function send(msg: FromWorker): void {
  port!.postMessage(msg);
}

port.on('message', (msg: ToWorker) => {
  void (async () => {
    try {
      switch (msg.type) {
        case 'start': {
          let client = clients.get(msg.plan.target);
          if (!client) clients.set(msg.plan.target, (client = new LoadClient(msg.plan.target)));
          running = client.start(msg.plan);
          send({ type: 'started' });
          break;
        }
        case 'mark':
          running?.mark();
          break;
        case 'count':
          send({ type: 'count', completed: running?.completed() ?? 0 });
          break;
        case 'stop': {
          const r = running;
          running = undefined;
          if (!r) throw new Error('stop without a running load');
          send({ type: 'result', result: await r.stop() });
          break;
        }
        case 'forget':
          clients.delete(msg.target);
          break;
        case 'close':
          clients.clear();
          port!.close();
          break;
      }
    } catch (err) {
      send({ type: 'error', message: (err as Error).stack ?? String(err) });
    }
  })();
});
