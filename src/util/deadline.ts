/**
 * An abort signal with a time limit, that also follows other signals: what
 * `AbortSignal.any([AbortSignal.timeout(ms), ...others])` says, without its Node 20 bug.
 *
 * Node 20's `AbortSignal.any` holds its sources weakly, and `AbortSignal.timeout`'s timer holds
 * its signal weakly too, so nothing keeps a timeout source alive: a garbage collection before the
 * timer fires loses it, and the composite never aborts (a known Node 20 defect; Node 22 keeps
 * it). A fetch given such a signal against a server that never answers waited for ever: one hung
 * metrics endpoint and one GC stopped that worker's scrape loop for good, and the worker stayed
 * down after it recovered. Here the timer holds the controller strongly until it fires or is
 * cleared.
 */
export interface Deadline {
  readonly signal: AbortSignal;
  /** Aborts now (a caller giving up early), with `reason`, or an AbortError as `AbortController.abort()` gives. */
  abort(reason?: unknown): void;
  /** Stops the timer and lets go of the followed signals; the signal stays as it is. */
  clear(): void;
}

/**
 * Aborts after `ms` with a `TimeoutError` DOMException (as `AbortSignal.timeout` does), or with
 * the reason of the first of `follow` to abort. The timer is unref'd: like `AbortSignal.timeout`'s,
 * it does not keep the process alive by itself.
 */
export function deadline(ms: number, follow: readonly AbortSignal[] = []): Deadline {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException(`The operation timed out after ${ms} ms.`, 'TimeoutError')), ms);
  timer.unref();
  const followed: Array<{ source: AbortSignal; onAbort: () => void }> = [];
  const clear = () => {
    clearTimeout(timer);
    for (const { source, onAbort } of followed) source.removeEventListener('abort', onAbort);
    followed.length = 0;
  };
  for (const source of follow) {
    if (source.aborted) {
      controller.abort(source.reason);
      break;
    }
    const onAbort = () => controller.abort(source.reason);
    source.addEventListener('abort', onAbort, { once: true });
    followed.push({ source, onAbort });
  }
  // Once aborted, by whichever cause, nothing else can change it: let go at once.
  if (controller.signal.aborted) clear();
  else controller.signal.addEventListener('abort', clear, { once: true });
  return { signal: controller.signal, abort: (reason?: unknown) => controller.abort(reason), clear };
}
