/**
 * A request's class of service, from (most trusted first):
 *
 *  1. the route's `class` knob (Envoy config: the platform team's word, which a client cannot
 *     change);
 *  2. the class header (`classes.header`, `x-kvgate-request-class` by default), naming a class;
 *  3. in endpoint-picker mode, the Gateway API Inference Extension's `x-gateway-inference-objective`
 *     header. Its value is the name of an InferenceObjective resource, whose priority lives in the
 *     Kubernetes API, which kvgate does not watch: `classes.objectives` maps those names to classes
 *     (an objective named like a class means that class). An objective kvgate has no mapping for
 *     is what the GIE's picker does with one it cannot find: the default (priority 0) class;
 *  4. the config's default class.
 *
 * A value that names no class is ignored as if absent (the next source applies) and reported, so a
 * typo costs a log line, never the request. Values are compared lower-cased and trimmed.
 */
import type { Config } from '../config/schema.js';

export type ClassSource = 'knob' | 'header' | 'objective' | 'default';

export interface ServiceClass {
  name: string;
  /** The share of a worker's in-flight limit this class may fill. */
  share: number;
  source: ClassSource;
  /** A value that named no class and was ignored (shortened), for the log. */
  ignored?: { source: Exclude<ClassSource, 'default'>; value: string };
}

/** Longest header value looked at; a class name is at most 32 characters, an objective 253. */
const MAX_VALUE = 253;

export function serviceClass(
  headers: ReadonlyMap<string, string>,
  classes: Config['classes'],
  knob: string | undefined,
  endpointPicker: boolean,
  objectiveHeader: string,
): ServiceClass {
  // Written without per-call closures: this runs on every request, and two closures (plus their
  // context) per call showed in the gate's profile.
  let ignored: ServiceClass['ignored'];
  if (knob !== undefined) {
    const s = shareOf(classes, knob);
    if (s !== undefined) return classOf(knob, s, 'knob', ignored);
    ignored = ignoredOf('knob', knob);
  }
  const header = value(headers.get(classes.header));
  if (header !== undefined) {
    const s = shareOf(classes, header);
    if (s !== undefined) return classOf(header, s, 'header', ignored);
    ignored ??= ignoredOf('header', header);
  }
  if (endpointPicker) {
    const objective = headers.get(objectiveHeader)?.trim();
    if (objective !== undefined && objective !== '' && objective.length <= MAX_VALUE) {
      // Own keys only: the header is the client's, and `constructor` or `__proto__` must not
      // reach Object.prototype.
      const mapped = (Object.hasOwn(classes.objectives, objective) ? classes.objectives[objective] : undefined) ?? (shareOf(classes, objective.toLowerCase()) !== undefined ? objective.toLowerCase() : undefined);
      // An objective with no class is not an error: the GIE's own picker gives it priority 0.
      if (mapped !== undefined) {
        const s = shareOf(classes, mapped);
        if (s !== undefined) return classOf(mapped, s, 'objective', ignored);
        ignored ??= ignoredOf('objective', mapped);
      }
    }
  }
  return classOf(classes.default, shareOf(classes, classes.default) ?? 1, 'default', ignored);
}

function shareOf(classes: Config['classes'], name: string): number | undefined {
  for (const l of classes.levels) if (l.name === name) return l.share;
  return undefined;
}

function classOf(name: string, share: number, source: ClassSource, ignored: ServiceClass['ignored']): ServiceClass {
  return ignored ? { name, share, source, ignored } : { name, share, source };
}

/** The first value that named no class, shortened for the log. */
function ignoredOf(source: Exclude<ClassSource, 'default'>, name: string): NonNullable<ServiceClass['ignored']> {
  return { source, value: name.length > 64 ? `${name.slice(0, 64)}…` : name };
}

function value(raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  const v = raw.trim().toLowerCase();
  return v === '' ? undefined : v.slice(0, MAX_VALUE + 1);
}
