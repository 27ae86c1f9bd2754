/**
 * Progress of a long run for people, on stderr: on a terminal one line redrawn in place (step,
 * elapsed, time left); anywhere else (a pipe, CI, a log) a line per step, so a piped run is never
 * silent for a minute. The time left scales the planned duration of the remaining steps by how
 * far the finished ones overran their plan (set-up, ramps, a loaded machine).
 */
export interface ProgressSink {
  write(text: string): void;
  isTTY?: boolean;
}

export interface StepProgress {
  /** A step starts; `plannedMs` is how long it should take. */
  step(label: string, plannedMs: number): void;
  /** Clears the terminal line (a piped run needs nothing). */
  done(): void;
}

const seconds = (ms: number) => (ms >= 60_000 ? `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s` : `${Math.round(ms / 1000)} s`);

/**
 * `totalPlanned` and each step's plan are milliseconds, or any unit of work when `plannedIsTime`
 * is false (requests, say): then the time left is known once the first step has finished.
 */
export function stepProgress(
  prefix: string,
  totalSteps: number,
  totalPlanned: number,
  sink: ProgressSink,
  now: () => number = () => performance.now(),
  plannedIsTime = true,
): StepProgress {
  const totalPlannedMs = totalPlanned;
  const started = now();
  let index = 0;
  let plannedDone = 0;
  let lastPlanned = 0;
  let drawn = false;
  return {
    step(label, plannedMs) {
      plannedDone += lastPlanned;
      lastPlanned = plannedMs;
      index++;
      const elapsed = now() - started;
      // Before any step has finished, the plan is all there is to go by (when it is in time).
      const pace = plannedDone > 0 ? (plannedIsTime ? Math.max(1, elapsed / plannedDone) : elapsed / plannedDone) : 1;
      const left = Math.max(0, totalPlannedMs - plannedDone) * pace;
      const width = String(totalSteps).length;
      const eta = plannedDone === 0 && !plannedIsTime ? 'time left known after this step' : `~${seconds(left)} left`;
      const line = `${prefix} [${String(index).padStart(width)}/${totalSteps}] ${label} · ${seconds(elapsed)} elapsed, ${eta}`;
      if (sink.isTTY) {
        sink.write(`\r\x1b[2K${line}`);
        drawn = true;
      } else {
        sink.write(`${line}\n`);
      }
    },
    done() {
      if (drawn) sink.write('\r\x1b[2K');
    },
  };
}
