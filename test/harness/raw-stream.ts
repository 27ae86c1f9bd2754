/**
 * One ext_proc `Process` call seen from Envoy's side, as a pull queue: everything the server
 * sends (replies, then its final status) is queued in arrival order and read with `next()`.
 * The harness drives Envoy's state machine on top of it; tests can also use it directly to
 * script wrong phase orders, half-closes and cancels.
 */
import type * as grpc from '@grpc/grpc-js';
import type { ProcessingRequest, ReceivedProcessingResponse as ProcessingResponse } from '../../src/extproc/messages.js';

/** The server ended the call (OK = clean close; anything else = gRPC error). */
export interface StreamClosed {
  closed: true;
  status: grpc.StatusObject;
}

/** `next()` waited its whole timeout without an event. */
export interface StreamTimedOut {
  timedOut: true;
}

export type StreamEvent = ProcessingResponse | StreamClosed;

export function isClosed(e: StreamEvent | StreamTimedOut): e is StreamClosed {
  return (e as StreamClosed).closed === true;
}

export function isTimedOut(e: StreamEvent | StreamTimedOut): e is StreamTimedOut {
  return (e as StreamTimedOut).timedOut === true;
}

export type ProcessCall = grpc.ClientDuplexStream<ProcessingRequest, ProcessingResponse>;

export class RawStream {
  private readonly queue: StreamEvent[] = [];
  private waiter: ((e: StreamEvent) => void) | undefined;
  private status: grpc.StatusObject | undefined;
  private ended = false;
  private cancelled = false;

  constructor(
    private readonly call: ProcessCall,
    onSettled?: () => void,
  ) {
    call.on('data', (m: ProcessingResponse) => this.push(m));
    call.on('status', (s: grpc.StatusObject) => {
      if (this.status) return;
      this.status = s;
      this.push({ closed: true, status: s });
      onSettled?.();
    });
    // A non-OK end also emits 'error'; the 'status' event already carries it. Without a
    // listener an error (including our own cancel) would crash the process.
    call.on('error', () => {});
  }

  private push(e: StreamEvent): void {
    const w = this.waiter;
    if (w) {
      this.waiter = undefined;
      w(e);
    } else {
      this.queue.push(e);
    }
  }

  /** The server's final status, once it has arrived. */
  get closedStatus(): grpc.StatusObject | undefined {
    return this.status;
  }

  /** Events received but not yet read. */
  get pending(): number {
    return this.queue.length;
  }

  /** Takes the oldest received event without waiting (undefined when none is queued). */
  shiftPending(): StreamEvent | undefined {
    return this.queue.shift();
  }

  /** Sends one message; returns false (sending nothing) once the call is over or half-closed. */
  write(msg: ProcessingRequest): boolean {
    if (this.status || this.ended || this.cancelled) return false;
    this.call.write(msg);
    return true;
  }

  /**
   * The next event in arrival order, waiting up to `timeoutMs`. After the close event has been
   * read, every further call returns it again at once.
   */
  next(timeoutMs = 1000): Promise<StreamEvent | StreamTimedOut> {
    const queued = this.queue.shift();
    if (queued) return Promise.resolve(queued);
    if (this.status) return Promise.resolve({ closed: true, status: this.status });
    if (this.waiter) return Promise.reject(new Error('RawStream.next() is already waiting'));
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiter = undefined;
        resolve({ timedOut: true });
      }, Math.max(0, timeoutMs));
      this.waiter = (e) => {
        clearTimeout(timer);
        resolve(e);
      };
    });
  }

  /** Half-close: the server sees end of its request stream. */
  end(): void {
    if (this.ended || this.cancelled) return;
    this.ended = true;
    this.call.end();
  }

  /** Reset: the server sees CANCELLED. */
  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.call.cancel();
  }

  /** Envoy's default closeStream(): END_STREAM, then reset. Leaves nothing open. */
  close(): void {
    this.end();
    this.cancel();
  }
}
