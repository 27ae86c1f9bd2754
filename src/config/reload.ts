/**
 * Config changes without a restart. The gate's config file is re-read when it changes (fs.watch on
 * its directory, debounced) or on SIGHUP; the new text is validated in full first, and only a
 * valid config is handed over, in one piece, to be swapped in (`Gate.reconfigure`). An invalid
 * file changes nothing: the running config stays and the log says why.
 *
 * The directory is watched rather than the file because editors replace files by renaming and
 * Kubernetes updates a mounted ConfigMap by swapping a symlink; neither is an event on the old
 * file. An event for the file's name, or for Kubernetes' `..data` names, triggers a re-read (other
 * files in the directory do not), and a re-read that yields the running config again does
 * nothing. The path is also stat()ed every couple of seconds, for the changes a directory watch
 * has no event for: a symlink into another directory changed there, or the directory itself
 * removed and made again (the watch stays on the old one; it is renewed).
 *
 * A few settings are wired into long-lived objects at startup (the store connection, the gRPC
 * message size limit, the idle-stream sweep). A reload keeps their running values and logs that
 * a restart is needed for them, rather than pretending to apply them.
 */
import { statSync, unwatchFile, watch, watchFile, type FSWatcher, type Stats } from 'node:fs';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import type { Logger } from 'pino';
import { KvgateError } from '../errors.js';
import { DEFAULTS } from './defaults.js';
import { deepFreeze } from '../util/deep-freeze.js';
import { parseConfigText, readConfigText } from './load.js';
import type { Config } from './schema.js';

export type ReloadTrigger = 'watch' | 'SIGHUP';
export const RELOAD_OUTCOMES = ['applied', 'unchanged', 'rejected'] as const;
export type ReloadOutcome = (typeof RELOAD_OUTCOMES)[number];

export interface ConfigReloaderOptions {
  file: string;
  logger: Logger;
  /** The config running now. */
  current(): Config;
  /** Swaps in a new, valid config. */
  apply(config: Config): void;
  debounceMs?: number;
  /** How often the file is also stat()ed, for changes the directory watch cannot see. */
  pollMs?: number;
  /**
   * Told every re-read's outcome, and the restart-only settings the file changes (empty after a
   * rejection: the file says nothing usable), so they can be exported: a log line is read by
   * someone looking, a metric pages someone who is not.
   */
  onOutcome?(outcome: ReloadOutcome, restartNeeded: readonly string[]): void;
}

/** Settings read once at startup, as [path, getter]; a reload keeps their running values. */
const RESTART_ONLY: ReadonlyArray<[string, (c: Config) => unknown]> = [
  ['store', (c) => c.store],
  ['leases.ttl_s', (c) => c.leases.ttl_s],
  ['limits.max_body_bytes', (c) => c.limits.max_body_bytes],
  ['limits.stream_idle_s', (c) => c.limits.stream_idle_s],
  ['prefix.ttl_s', (c) => c.prefix.ttl_s],
];

/**
 * `next` with the restart-only settings of `running` carried over, and the names of those that
 * differ (they take effect at the next restart).
 */
export function carryRestartOnly(running: Config, next: Config): { config: Config; restartNeeded: string[] } {
  const restartNeeded = RESTART_ONLY.filter(([, get]) => !isDeepStrictEqual(get(running), get(next))).map(([p]) => p);
  if (restartNeeded.length === 0) return { config: next, restartNeeded };
  const config = deepFreeze({
    ...next,
    store: running.store,
    leases: running.leases,
    limits: { ...next.limits, max_body_bytes: running.limits.max_body_bytes, stream_idle_s: running.limits.stream_idle_s },
    prefix: { ...next.prefix, ttl_s: running.prefix.ttl_s },
  });
  return { config, restartNeeded };
}

export class ConfigReloader {
  private watcher: FSWatcher | undefined;
  /** The inode of the directory `watcher` watches: another one there means it was made again. */
  private watchedIno: number | undefined;
  private polling = false;
  /** The poll's listener, kept so close() removes this reloader's alone (two may watch one file). */
  private readonly onStat = (now: Stats, before: Stats): void => {
    if (now.ino === before.ino && now.mtimeMs === before.mtimeMs && now.ctimeMs === before.ctimeMs && now.size === before.size) return;
    this.watchDirectory();
    this.schedule();
  };
  private timer: NodeJS.Timeout | undefined;
  /** The last text that failed validation, so repeated events on the same bad file log once. */
  private lastRejected: string | undefined;

  constructor(private readonly opts: ConfigReloaderOptions) {}

  /** Starts watching the file's directory, and polling the file. Never throws: without a watch, the poll and SIGHUP still work. */
  watch(): void {
    if (this.polling) return;
    this.polling = true;
    // Any change of what the path leads to (its inode, size or times; the file appearing or going)
    // schedules a re-read, and renews a directory watch that the directory's removal ended.
    watchFile(this.opts.file, { persistent: false, interval: this.opts.pollMs ?? DEFAULTS.configPollMs }, this.onStat);
    this.watchDirectory();
  }

  /** Watches the file's directory as it is now: a new watch when it was removed and made again. */
  private watchDirectory(): void {
    const dir = path.dirname(path.resolve(this.opts.file));
    let ino: number;
    try {
      ino = statSync(dir).ino;
    } catch (err) {
      // No directory now; the poll renews the watch once there is one.
      this.opts.logger.warn({ file: this.opts.file, err: (err as Error).message }, 'cannot watch the config directory; changes are still seen by a stat poll every few seconds, or at once with SIGHUP');
      return;
    }
    if (this.watcher && this.watchedIno === ino) return;
    this.watcher?.close();
    this.watcher = undefined;
    this.watchedIno = ino;
    try {
      const base = path.basename(this.opts.file);
      // Only events that can be the config: its own name (written, or renamed over), Kubernetes'
      // `..data` swap, or an event without a name. Other files there (a log kept beside the
      // config) would otherwise re-read it on every write and, written more often than the
      // debounce, hold a real change back for as long as they are written.
      this.watcher = watch(dir, { persistent: false }, (_event, name) => {
        if (name === null || name === base || String(name).startsWith('..')) this.schedule();
      });
      this.watcher.on('error', (err) => {
        this.opts.logger.warn({ file: this.opts.file, err: err.message }, 'config directory watch failed; changes are still seen by a stat poll every few seconds, or at once with SIGHUP');
        this.watcher?.close();
        this.watcher = undefined;
      });
    } catch (err) {
      this.opts.logger.warn({ file: this.opts.file, err: (err as Error).message }, 'cannot watch the config directory; changes are still seen by a stat poll every few seconds, or at once with SIGHUP');
    }
  }

  /** Re-reads the file now: validated, then applied whole, or rejected with the running config kept. */
  reload(trigger: ReloadTrigger): ReloadOutcome {
    const { file, logger } = this.opts;
    let next: Config;
    let text: string | undefined;
    try {
      text = readConfigText(file);
      next = parseConfigText(text, file);
    } catch (err) {
      // Watch events come in bursts for one save; say it once per bad text (SIGHUP always answers).
      if (trigger !== 'watch' || text === undefined || text !== this.lastRejected) {
        logger.error({ file, trigger, err: KvgateError.from(err).message }, 'config reload rejected; keeping the running config');
      }
      this.lastRejected = text;
      this.opts.onOutcome?.('rejected', []);
      return 'rejected';
    }
    this.lastRejected = undefined;
    const running = this.opts.current();
    const { config, restartNeeded } = carryRestartOnly(running, next);
    if (isDeepStrictEqual(config, running)) {
      // An edit of restart-only settings alone is news to the operator who made it, whatever the
      // trigger; a watch event with nothing changed (an editor's second write) is not.
      const level = trigger === 'watch' && restartNeeded.length === 0 ? 'debug' : 'info';
      logger[level]({ file, trigger, ...(restartNeeded.length > 0 ? { restart_needed: restartNeeded } : {}) }, 'config re-read; nothing to change');
      this.opts.onOutcome?.('unchanged', restartNeeded);
      return 'unchanged';
    }
    try {
      this.opts.apply(config);
    } catch (err) {
      // Valid, yet swapping it in failed: a bug, not the file. Thrown out of a watch timer it would
      // end the process, and a ConfigMap update reaches every replica at once.
      logger.error({ file, trigger, err: KvgateError.from(err).message }, 'config reload failed while being applied; restart kvgate to be sure which config runs');
      this.opts.onOutcome?.('rejected', []);
      return 'rejected';
    }
    // What changed, by section and worker, so the line answers "did my edit take?" on its own.
    const ids = (c: Config) => new Set(c.workers.map((w) => w.id));
    const [before, after] = [ids(running), ids(config)];
    logger.info(
      {
        file,
        trigger,
        changed: (Object.keys(config) as Array<keyof Config>).filter((k) => !isDeepStrictEqual(config[k], running[k])),
        workers_added: [...after].filter((id) => !before.has(id)),
        workers_removed: [...before].filter((id) => !after.has(id)),
        pools: config.pools.map((p) => ({ name: p.name, workers: p.workers.length })),
        ...(restartNeeded.length > 0 ? { restart_needed: restartNeeded } : {}),
      },
      'config reloaded',
    );
    this.opts.onOutcome?.('applied', restartNeeded);
    return 'applied';
  }

  close(): void {
    clearTimeout(this.timer);
    if (this.polling) unwatchFile(this.opts.file, this.onStat);
    this.polling = false;
    this.watcher?.close();
    this.watcher = undefined;
  }

  private schedule(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.reload('watch'), this.opts.debounceMs ?? DEFAULTS.configReloadDebounceMs);
    this.timer.unref();
  }
}
