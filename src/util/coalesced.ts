/**
 * Runs an async job one at a time. A call while it runs does not start a second run: it asks the
 * running one to go round once more before settling, and shares its promise. So a burst of
 * requests costs at most one extra run, and none is lost.
 */
export class Coalesced {
  private run: Promise<void> | undefined;
  private again = false;

  constructor(
    private readonly job: () => Promise<void>,
    /** Checked before each extra round: false stops the repeats (e.g. after close). */
    private readonly keepGoing: () => boolean = () => true,
  ) {}

  trigger(): Promise<void> {
    if (this.run) {
      this.again = true;
      return this.run;
    }
    const run = (async () => {
      do {
        this.again = false;
        await this.job();
      } while (this.again && this.keepGoing());
    })().finally(() => {
      this.run = undefined;
    });
    this.run = run;
    return run;
  }
}

/**
 * A periodic job whose tick does nothing while its previous run is still going: the caller gets
 * that run's promise. A timer that started a run per tick regardless piled up calls against a
 * slow store (one per tick for as long as each takes: tens at once at a short interval), and
 * their replies could land out of order, an older read overwriting a newer one.
 */
export function skipWhileRunning(job: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () =>
    (running ??= job().finally(() => {
      running = undefined;
    }));
}
