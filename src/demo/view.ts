/**
 * What `kvgate demo` shows. On a terminal: one compact frame (the fleet, then each session's
 * trail of workers), redrawn in place. Elsewhere (a pipe, a log, CI): one plain line per answered
 * turn. Both end with the same summary.
 */
import { SYSTEM_PROMPT_NAMES } from './conversations.js';
import { demoTotals, type DemoEvent, type DemoState, type DemoSummary } from './run.js';
import { plural } from '../util/plural.js';

/** Sessions listed in the live frame; the rest are counted, so the frame fits a terminal. */
const MAX_SESSION_ROWS = 24;

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const ms = (x: number) => (Number.isFinite(x) ? `${Math.round(x)} ms` : '-');

/** The worker's number (`worker_2` → `2`), for compact trails. */
function short(id: string): string {
  const m = /(\d+)$/.exec(id);
  return m ? m[1]! : id;
}

export function headerLines(state: DemoState): string[] {
  const o = state.options;
  return [
    `kvgate demo: ${plural(state.workers.length, state.external ? 'cluster' : 'fake worker')}, ${plural(o.sessions, 'session')} × ${plural(o.turns, 'turn')} (at most ${o.durationS} s), ${plural(SYSTEM_PROMPT_NAMES.length, 'shared system prompt')}`,
    state.external
      ? `gate: the running one at ${state.grpcTarget} (admin ${state.adminUrl}); its clusters: ${state.workers.map((w) => `${w.id} → ${w.worker.url}`).join(', ')}`
      : `gate: ext_proc ${state.grpcTarget}, admin ${state.adminUrl} (while it runs: kvgate status --admin ${state.adminUrl})`,
  ];
}

/** One plain line for an event. */
export function eventLine(e: DemoEvent): string {
  const t = `[${e.atS.toFixed(2).padStart(6)}s]`;
  const s = e.session;
  if (e.kind === 'turn') {
    const where = s.turns === 1 ? 'placed' : e.moved ? 'MOVED' : 'stayed';
    return `${t} ${s.id} (prompt ${s.systemPrompt}) turn ${s.turns} → ${e.worker} ${where}; cached ${e.cachedTokens}/${e.promptTokens} prompt tokens; first token ${ms(e.ttftMs)}`;
  }
  if (e.kind === 'shed') return `${t} ${s.id} shed by the gate (${e.status}); retrying`;
  return `${t} ${s.id} failed: ${e.message}`;
}

/** The live frame: totals, a line per worker, a trail per session. */
export function frameLines(state: DemoState): string[] {
  const { prompt, cached, followUps, stayed } = demoTotals(state);
  const elapsed = (performance.now() - state.startedAt) / 1000;
  const lines = [
    ...headerLines(state),
    '',
    `${elapsed.toFixed(1)} s   requests ${state.requests}   KV hit rate ${pct(prompt > 0 ? cached / prompt : 0)}   ` +
      `sticky ${followUps > 0 ? pct(stayed / followUps) : '-'}   shed ${state.shed}   errors ${state.errors}`,
    '',
    `${'WORKER'.padEnd(10)} ${'RUN'.padStart(4)} ${'WAIT'.padStart(5)} ${'KV USE'.padStart(7)} ${'REQS'.padStart(5)} ${'HIT RATE'.padStart(9)} ${'1ST TOKEN'.padStart(10)}`,
  ];
  for (const w of state.workers) {
    // A model server the demo did not start (--upstream) shows no engine figures.
    const e = w.worker.engine;
    lines.push(
      `${w.id.padEnd(10)} ${(e ? String(e.requestsRunning) : '-').padStart(4)} ${(e ? String(e.requestsWaiting) : '-').padStart(5)} ` +
        `${(e ? pct(e.kvUsage) : '-').padStart(7)} ${String(w.requests).padStart(5)} ${pct(w.promptTokens > 0 ? w.cachedTokens / w.promptTokens : 0).padStart(9)} ` +
        `${ms(w.requests > 0 ? w.ttftMsTotal / w.requests : NaN).padStart(10)}`,
    );
  }
  lines.push('', `${'SESSION'.padEnd(8)} PROMPT  TURNS  WORKER PER TURN`);
  for (const s of state.sessions.slice(0, MAX_SESSION_ROWS)) {
    const trail = s.workers.map((w, i) => (i > 0 && w !== s.workers[i - 1] ? `>${short(w)}` : short(w))).join(' ');
    lines.push(`${s.id.padEnd(8)} ${s.systemPrompt.padEnd(6)}  ${`${s.turns}/${state.options.turns}`.padStart(5)}  ${trail}`);
  }
  if (state.sessions.length > MAX_SESSION_ROWS) lines.push(`… and ${state.sessions.length - MAX_SESSION_ROWS} more sessions`);
  return lines;
}

export function summaryLines(sum: DemoSummary): string[] {
  const lines = [
    `done in ${sum.elapsed_s.toFixed(1)} s: ${plural(sum.requests, 'request')}, ${sum.shed} shed, ${sum.errors} failed${sum.unrouted > 0 ? `, ${sum.unrouted} by the fallback route` : ''}`,
    `KV hit rate: ${pct(sum.hit_rate)} of prompt tokens were served from the prefix cache`,
    `sticky: ${sum.stayed}/${sum.follow_ups} follow-up turns stayed on their session's worker (${sum.follow_ups > 0 ? pct(sum.sticky_rate) : '-'})`,
  ];
  for (const w of sum.workers) {
    lines.push(w.requests === 0 ? `  ${w.id}: no requests` : `  ${w.id}: ${plural(w.requests, 'request')}, hit rate ${pct(w.hit_rate)}, first token ${ms(w.mean_ttft_ms)} on average`);
  }
  for (const s of sum.sessions) {
    const distinct = [...new Set(s.workers)];
    lines.push(`  ${s.id} (prompt ${s.system_prompt}): ${plural(s.turns, 'turn')} on ${distinct.length === 0 ? '-' : distinct.join(', ')}`);
  }
  return lines;
}
